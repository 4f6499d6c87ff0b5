"""Reading one big Kineto trace with 1, 2, 4, … decode processes (load_kineto's `workers`): seconds per count, each
a fresh Python process (start-up and imports included), counts alternated, medians of repeats. This sets
load/kineto/reader.py's default (one process per usable core, up to MAX_WORKERS).

    python benchmarks/decode_workers.py --trace big.json --workers 1,2,4,8,12 --repeats 3 --out result.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _provenance import commit  # benchmarks/ is on sys.path when run as a script

READ = """
import sys, time
from pathlib import Path
t0 = time.perf_counter()
from kernelscope.load.kineto import load_kineto
tables = load_kineto(Path(sys.argv[1]), workers=int(sys.argv[2]))
print(time.perf_counter() - t0, tables.kernels.height)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    seconds: dict[int, list[float]] = {n: [] for n in counts}
    kernels = set()
    for _ in range(args.repeats):
        for n in counts:
            started = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", READ, str(args.trace), str(n)], check=True,
                                 capture_output=True, text=True).stdout.split()
            seconds[n].append(time.perf_counter() - started)
            kernels.add(int(out[1]))
    medians = {n: statistics.median(v) for n, v in seconds.items()}
    result = {
        "benchmark": "decode workers", "commit": commit(), "date": time.strftime("%Y-%m-%d"),
        "machine": {"node": platform.node(), "usable_cores": len(os.sched_getaffinity(0)),
                    "python": platform.python_version()},
        "trace": {"path": str(args.trace), "bytes": args.trace.stat().st_size},
        "what": "fresh process per read: python start-up, imports, load_kineto(trace, workers=N)",
        "kernels_read": sorted(kernels), "runs_s": seconds, "median_s": medians,
        "speedup_over_1": {n: medians[counts[0]] / m for n, m in medians.items()},
    }
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({"median_s": medians, "kernels_read": sorted(kernels)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
