"""The parse floor: the whole `kernelscope import --no-report` of a Kineto trace against the fastest parse-only read
of the same bytes, each a process tree of its own, at several sizes; their ratio and the memory each grows by per GB.

    python benchmarks/parse_floor.py --sizes 300,1000,2000 --repeats 5 [--work /tmp/ks-floor] [--old /tmp/before/src]

The parse-only read is the native reader's (simdjson, load/kineto/native/kineto_scan.cpp) over the trace's event
array, cut into the chunks and read by the threads the import itself uses, keeping nothing: the floor of any
import that parses the JSON at all. Traces are built once under --work (outside the repository; never committed)
by benchmarks/make_big_trace.py (decode steps of a committed H200 capture, repeated). Each process is timed whole
(wall, and user+system CPU of the process tree: resource.getrusage of children) and its peak memory is the peak
summed RSS of the tree, sampled every 20 ms (psutil). Floor, import (and --old's import) alternate, repeat by
repeat. `KERNELSCOPE_PROFILE=DIR` makes each import write a py-spy profile there (py-spy installed). Results go to
benchmarks/results/ as JSON.
"""

from __future__ import annotations

import argparse
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
from datetime import date
from pathlib import Path

import psutil
from _process import peak_rss_until_exit  # benchmarks/ is on sys.path when run as a script
from _provenance import commit  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]

FLOOR = """
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from kernelscope.load.kineto import native_tables
from kernelscope.load.kineto.chunks import chunk_ranges, release
from kernelscope.load.kineto.document import locate_events, open_trace_text
from kernelscope.load.kineto.reader import default_chunk_bytes, default_workers
scan = native_tables._kineto_scan.scan
path = Path(sys.argv[1])
with open_trace_text(path) as (plain, data):
    array = locate_events(path, data)
    chunk_bytes = default_chunk_bytes()
    workers = default_workers(array.length, chunk_bytes)
    chunks = chunk_ranges(data, array.offset, array.length, chunk_bytes, closed=not array.unclosed)
    def read(chunk):
        with memoryview(data) as whole, whole[chunk.start:chunk.stop] as piece:
            scanned = scan(piece, chunk.opens, chunk.closes)
        native_tables._kineto_scan.release()
        release(data, chunk.start, chunk.stop)  # as the reader does: the map's pages of a read chunk let go
        return scanned["event_count"] if scanned else 0
    with ThreadPoolExecutor(workers) as pool:
        events = sum(pool.map(read, chunks))
print(events, workers, len(chunks))
"""


def run_tree(cmd: list[str], env: dict[str, str]) -> dict:
    """One process tree: wall and CPU seconds, peak summed RSS, its last output line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = peak_rss_until_exit(proc)
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed ({proc.returncode}):\n{err[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = out.strip().splitlines()
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "peak_rss_bytes": peak,
            "out": lines[-1] if lines else ""}


def importer(src: Path, trace: Path, work: Path, profile: Path | None, tag: str) -> tuple[list[str], dict, Path]:
    out = Path(tempfile.mkdtemp(dir=work, prefix="run-")) / "run"
    cmd = [sys.executable, "-m", "kernelscope", "-q", "import", str(trace), "--no-report", "--out", str(out)]
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        cmd = ["py-spy", "record", "-r", "100", "-f", "raw", "-o", str(profile / f"{tag}.txt"), "--", *cmd]
    return cmd, dict(os.environ, PYTHONPATH=str(src)), out.parent


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def slope(sizes_gb: list[float], values: list[float]) -> float:
    """Least-squares growth of `values` per GB."""
    mx, my = statistics.fmean(sizes_gb), statistics.fmean(values)
    return sum((x - mx) * (y - my) for x, y in zip(sizes_gb, values, strict=True)) / sum(
        (x - mx) ** 2 for x in sizes_gb)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="300,1000,2000", help="trace sizes in MB (default 300,1000,2000)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "kernelscope-parse-floor")
    parser.add_argument("--old", type=Path, help="a second source tree's src/ whose import is measured alongside")
    parser.add_argument("--old-up-to", type=int, default=None, metavar="MB",
                        help="measure --old only at sizes up to this (default: every size)")
    parser.add_argument("--repeats-above", default=None, metavar="MB:N",
                        help="N repeats (instead of --repeats) at sizes above MB, e.g. 500:3")
    parser.add_argument("--out", type=Path, help="results JSON (default benchmarks/results/parse-floor-<date>.json)")
    args = parser.parse_args()
    if ROOT in args.work.resolve().parents:
        raise SystemExit("--work must be outside the repository")
    args.work.mkdir(parents=True, exist_ok=True)
    profile = Path(os.environ["KERNELSCOPE_PROFILE"]) if os.environ.get("KERNELSCOPE_PROFILE") else None
    src = ROOT / "src"
    trees = {"kernelscope": src, **({"before": args.old} if args.old else {})}
    load_start = os.getloadavg()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = []
    for mb in sizes:
        trace = args.work / f"trace-{mb}mb.json"
        if not trace.exists():
            subprocess.run([sys.executable, str(ROOT / "benchmarks/make_big_trace.py"), str(trace), "--mb", str(mb)],
                           check=True, stdout=subprocess.DEVNULL)
        here = {t: p for t, p in trees.items() if t != "before" or args.old_up_to is None or mb <= args.old_up_to}
        repeats = args.repeats
        if args.repeats_above:
            above, count = (int(x) for x in args.repeats_above.split(":"))
            repeats = count if mb > above else repeats
        runs: dict[str, list[dict]] = {"floor": [], **{f"import:{t}": [] for t in here}}
        for repeat in range(repeats):
            runs["floor"].append(run_tree([sys.executable, "-c", FLOOR, str(trace)],
                                          dict(os.environ, PYTHONPATH=str(src))))
            for label, tree in here.items():
                cmd, env, made = importer(tree, trace, args.work, profile, f"{label}-{mb}mb-{repeat}")
                runs[f"import:{label}"].append(run_tree(cmd, env))
                shutil.rmtree(made, ignore_errors=True)
            print(mb, repeat, {k: v[-1]["wall_s"] for k, v in runs.items()}, file=sys.stderr)
        entry = {"mb": mb, "bytes": trace.stat().st_size, "runs": runs}
        for key, measured in runs.items():
            entry[key] = {"median_wall_s": median(measured, "wall_s"), "median_cpu_s": median(measured, "cpu_s"),
                          "median_peak_rss_bytes": median(measured, "peak_rss_bytes")}
        for label in here:
            entry[f"import:{label}"]["over_floor_wall"] = round(
                entry[f"import:{label}"]["median_wall_s"] / entry["floor"]["median_wall_s"], 2)
            entry[f"import:{label}"]["over_floor_cpu"] = round(
                entry[f"import:{label}"]["median_cpu_s"] / entry["floor"]["median_cpu_s"], 2)
        results.append(entry)
    gb = [e["bytes"] / 1e9 for e in results]
    growth = {key: {"wall_s_per_gb": round(slope(gb, [e[key]["median_wall_s"] for e in results]), 3),
                    "cpu_s_per_gb": round(slope(gb, [e[key]["median_cpu_s"] for e in results]), 3),
                    "peak_rss_gb_per_gb": round(slope(gb, [e[key]["median_peak_rss_bytes"] / 1e9
                                                           for e in results]), 3)}
              for key in results[-1]["runs"]} if len(results) > 1 else {}
    result = {
        "benchmark": "parse-floor", "date": date.today().isoformat(), "commit": commit(),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "memory_bytes": psutil.virtual_memory().total, "python": platform.python_version()},
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "sizes": results, "growth_per_gb": growth,
        "goals": {"import_over_floor_wall": 1.5, "peak_rss_gb_per_gb": 0.5},
    }
    out = args.out or ROOT / "benchmarks/results" / f"parse-floor-{date.today().isoformat()}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for e in results:
        print(e["mb"], "MB", {k: v for k, v in e.items() if k.startswith(("floor", "import"))})
    print(json.dumps(growth, indent=2))
    print(out)


if __name__ == "__main__":
    main()
