"""The most any parallel import of 4 rank files can gain on this machine: the per-file work alone (read_rank, what
every import mode runs per file), 4 files read in turn by one process against 2 files each by two processes that
start together, with no start-up, no transfer of tables and no writing.

    python benchmarks/import_parallel_bound.py [--work /tmp/ks-import-parallel] [--repeats 5] [--out FILE]

The rank files are those benchmarks/import_parallel.py builds (run it first, or give --work). Each process imports
kernelscope and reads one file untimed (imports, page cache), then all wait at a barrier; the time is from the
barrier to the last process done (CLOCK_MONOTONIC, shared by the processes). One and two processes alternate;
medians are compared. The whole command's bound follows by adding its one-process parts (start-up, writing, exit),
which import-parallel-timeline-2026-11-25.md measured."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))
from _provenance import commit  # noqa: E402


def _reader(files: list[str], barrier, results) -> None:
    from kernelscope.commands.importers.rank_files import read_rank

    read_rank(files[0], workers=1)  # untimed: imports, page cache, allocator
    barrier.wait()
    start = time.monotonic()
    for path in files:
        read_rank(path, workers=1)
    results.put((start, time.monotonic()))


def _timed(groups: list[list[str]]) -> float:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(len(groups)), ctx.Queue()
    processes = [ctx.Process(target=_reader, args=(group, barrier, results)) for group in groups]
    for process in processes:
        process.start()
    spans = [results.get() for _ in processes]
    for process in processes:
        process.join()
    return max(end for _, end in spans) - min(start for start, _ in spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/ks-import-parallel"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    files = [str(args.work / f"rank{rank}.json") for rank in range(4)]
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        sys.exit(f"{missing[0]}: no such file (run benchmarks/import_parallel.py first)")
    layouts = {"one process": [files], "two processes": [files[:2], files[2:]]}
    load_before = os.getloadavg()
    seconds: dict[str, list[float]] = {name: [] for name in layouts}
    for _ in range(args.repeats):
        for name, groups in layouts.items():
            seconds[name].append(_timed(groups))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    result = {
        "benchmark": "import-parallel-bound",
        "date": date.today().isoformat(),
        "commit": commit(),
        "machine": {"nproc": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "input": {"files": 4, "bytes_per_file": Path(files[0]).stat().st_size},
        "what": "read_rank of 4 files: one process in turn against two processes with two files each, started "
                "together at a barrier after one untimed read each",
        "seconds": seconds,
        "median_s": medians,
        "speedup_of_the_per_file_work": medians["one process"] / medians["two processes"],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
