"""The fast test tier's cost: runs `python3 -m pytest -m "not slow"` (or the whole suite with --full) from this
checkout and writes one JSON record: wall time, the CPU time of pytest and every process it waited for (user and
system, from the kernel's accounting of children, as /usr/bin/time reports it), the test counts, and the machine's
cores and load average before and after, since on a shared machine the wall time says more about the others.

    python3 benchmarks/test_tiers.py --out benchmarks/results/test-tiers-DATE.json [--full]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

from _provenance import commit  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?)\b")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the JSON record to write")
    parser.add_argument("--full", action="store_true", help="the whole suite instead of the fast tier")
    args = parser.parse_args(argv)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if not args.full:
        command[3:3] = ["-m", "not slow"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    load_before = os.getloadavg()
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    load_after = os.getloadavg()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    record = {
        "what": f"the {'whole test suite' if args.full else 'fast test tier'} (`{shlex.join(['python3', *command[1:]])}`):"
                " wall time, and the CPU time of pytest and the processes it waited for",
        "date": date.today().isoformat(),
        "commit": commit(),
        "command": f"python3 benchmarks/test_tiers.py{' --full' if args.full else ''}",
        "machine": {"cores": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "python": platform.python_version(),
                    "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in load_after]},
        "exit_code": done.returncode,
        "tests": {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in COUNTS.findall(summary)},
        "wall_s": round(wall, 1),
        "user_s": round(usage.ru_utime, 1),
        "system_s": round(usage.ru_stime, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=1))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
