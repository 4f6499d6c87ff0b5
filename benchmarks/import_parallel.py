"""Import of 4 rank files: one process (`--jobs 1`) against the default parallel read, whole-process wall time.

    python benchmarks/import_parallel.py [--mb 60] [--repeats 3] [--work /tmp/ks-import-parallel] [--out FILE]

The rank files are copies of one Kineto trace built by benchmarks/make_big_trace.py from a committed H200 trace
(outside the repository, in --work). Each measurement is a fresh `kernelscope -q import r0 r1 r2 r3 --no-report`
process; serial and parallel alternate, after one warm-up of each (page cache, fork server code on disk), and the
medians are compared. The kernels and ops tables of both must be identical. The machine's load average before and
after is recorded: other processes on a two-core machine slow the parallel run most. Writes
benchmarks/results/import-parallel-<date>.json."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from _provenance import commit  # noqa: E402
from make_big_trace import DEFAULT_SOURCE, build  # noqa: E402

RANKS = 4


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _import(files: list[Path], out: Path, jobs: list[str]) -> float:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kernelscope", "-q", "import", *map(str, files), "--out", str(out),
                    "--no-report", *jobs], check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=60.0, help="size of each rank file in MB (default 60)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ks-import-parallel"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    first = args.work / "rank0.json"
    built = build(DEFAULT_SOURCE, first, int(args.mb * 1e6))
    files = [first]
    for rank in range(1, RANKS):
        files.append(args.work / f"rank{rank}.json")
        shutil.copyfile(first, files[-1])
    modes = {"serial": ["--jobs", "1"], "parallel": []}
    outs = {mode: args.work / f"out-{mode}" for mode in modes}
    load_before = os.getloadavg()
    for mode, jobs in modes.items():  # warm-up
        _import(files, outs[mode], jobs)
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(args.repeats):
        for mode, jobs in modes.items():
            times[mode].append(_import(files, outs[mode], jobs))
    load_after = os.getloadavg()
    identical = {table: pl.read_parquet(outs["serial"] / table).equals(pl.read_parquet(outs["parallel"] / table))
                 for table in ("kernels.parquet", "ops.parquet")}
    kernels = pl.read_parquet(outs["parallel"] / "kernels.parquet")
    medians = {mode: statistics.median(t) for mode, t in times.items()}
    result = {
        "benchmark": "import-parallel",
        "date": date.today().isoformat(),
        "commit": commit(),
        "machine": {"nproc": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version(),
                    "loadavg_before": load_before, "loadavg_after": load_after,
                    "note": "shared with other processes: the load average shows how busy it was"},
        "input": {"ranks": RANKS, "bytes_per_file": first.stat().st_size, "built_from": built["source"],
                  "decode_copies": built["decode_copies"], "kernels": kernels.height},
        "command": "kernelscope -q import rank0.json … rank3.json --no-report [--jobs 1]",
        "seconds": times,
        "median_s": medians,
        "speedup": medians["serial"] / medians["parallel"],
        "identical_tables": identical,
    }
    text = json.dumps(result, indent=2)
    print(text)
    target = args.out or ROOT / "benchmarks" / "results" / f"import-parallel-{result['date']}.json"
    target.write_text(text + "\n")
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
