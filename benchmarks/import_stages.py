"""Where one `kernelscope import --no-report` spends its time and memory, stage by stage, in one process.

    python benchmarks/import_stages.py TRACE [--out JSON] [--no-detail]

Each stage is a function of the import wrapped by name where its caller looks it up (reading, auditing,
attribution, costs and names, the critical paths and their parts, the summary, writing): per call its wall and
CPU seconds (all threads of the process), the resident memory as it began and the peak inside it (sampled every
5 ms by a thread; stages nest, so a stage's peak includes what the stages inside it held). Polars' and NumPy's
buffers are all in the resident figure (tracemalloc would miss Polars' own allocator). PYTHONPATH decides which
tree is measured; Polars' allocator is set as the command sets it. The import writes to a temporary folder,
removed afterwards.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

# (module, attribute): the stages, outermost first. Functions imported by name are wrapped in the module that
# calls them.
STAGES = [
    ("kernelscope.commands.importers.rank_files", "read_trace"),
    ("kernelscope.commands.importers.rank_files", "audit_trace"),
    ("kernelscope.commands.importers.rank_files", "attribute"),
    ("kernelscope.commands.importers.rank_files", "infer_attribution"),
    ("kernelscope.pipeline", "with_costs_and_names"),
    ("kernelscope.pipeline", "phase_table"),
    ("kernelscope.pipeline", "run_critical_paths"),
    ("kernelscope.pipeline", "summarize"),
    ("kernelscope.load.rundir", "write_run"),
]
DETAIL = [  # inside the critical paths (those a tree has: its layout changed with the segment table's)
    ("kernelscope.analyze.paths.critical_path", "step_windows"),
    ("kernelscope.analyze.paths.critical_path", "dependency_graph"),
    ("kernelscope.analyze.paths.critical_path", "paths_of"),
    ("kernelscope.analyze.paths.critical_path", "states"),
    ("kernelscope.analyze.paths.critical_path", "_segments"),
    ("kernelscope.analyze.paths.critical_path", "_gap_pieces"),
    ("kernelscope.analyze.paths.critical_path", "_named"),
    ("kernelscope.analyze.paths.critical_path", "segment_table"),
    ("kernelscope.analyze.paths.path_segments", "_gap_pieces"),
    ("kernelscope.analyze.paths.path_segments", "_named"),
    ("kernelscope.analyze.paths.critical_path", "_step_table"),
    ("kernelscope.load.rundir", "write_critical_path"),
]


class Sampler(threading.Thread):
    """The process's resident memory every `interval_s`, folded into the peak of every open stage."""

    def __init__(self, interval_s: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.interval_s, self.open, self.lock, self.done = interval_s, [], threading.Lock(), False
        self.process = psutil.Process()

    def rss(self) -> int:
        return self.process.memory_info().rss

    def run(self) -> None:
        while not self.done:
            now = self.rss()
            with self.lock:
                for record in self.open:
                    record["peak"] = max(record["peak"], now)
            time.sleep(self.interval_s)


def wrap(sampler: Sampler, records: list[dict], name: str, fn):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        rss = sampler.rss()
        record = {"stage": name, "rss_start": rss, "peak": rss}
        with sampler.lock:
            sampler.open.append(record)
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            record["wall_s"], record["cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu
            record["peak"] = max(record["peak"], sampler.rss())
            with sampler.lock:
                sampler.open.remove(record)
            records.append(record)
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--out", type=Path, help="write the stages here as JSON")
    parser.add_argument("--no-detail", action="store_true", help="only the import's main stages")
    args = parser.parse_args()
    from kernelscope.allocator import POLARS_ALLOCATOR_CONF, configure_polars_allocator

    configure_polars_allocator(POLARS_ALLOCATOR_CONF)  # as the CLI does for an import, before Polars loads
    from kernelscope.cli import main as cli_main

    sampler = Sampler()
    records: list[dict] = []
    for module, attr in STAGES + ([] if args.no_detail else DETAIL):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        if hasattr(mod, attr):
            setattr(mod, attr, wrap(sampler, records, attr, getattr(mod, attr)))
    sampler.start()
    start_rss = sampler.rss()
    wall, cpu = time.perf_counter(), time.process_time()
    peak_process = psutil.Process()
    with tempfile.TemporaryDirectory() as work:
        sys.argv = ["kernelscope", "-q", "import", str(args.trace), "--no-report", "--out", str(Path(work) / "run")]
        try:
            cli_main()
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    sampler.done = True
    total = {"wall_s": round(time.perf_counter() - wall, 3), "cpu_s": round(time.process_time() - cpu, 3),
             "rss_start_gb": round(start_rss / 1e9, 3)}
    try:  # the kernel's own high-water mark of the process (Linux)
        status = Path(f"/proc/{peak_process.pid}/status").read_text()
        total["vm_hwm_gb"] = round(int(next(ln.split()[1] for ln in status.splitlines()
                                            if ln.startswith("VmHWM"))) * 1024 / 1e9, 3)
    except (OSError, StopIteration):
        pass
    stages = [{"stage": r["stage"], "wall_s": round(r["wall_s"], 3), "cpu_s": round(r["cpu_s"], 3),
               "rss_start_gb": round(r["rss_start"] / 1e9, 3), "peak_gb": round(r["peak"] / 1e9, 3),
               "grew_gb": round((r["peak"] - r["rss_start"]) / 1e9, 3)} for r in records]
    result = {"trace": str(args.trace), "bytes": args.trace.stat().st_size, "total": total, "stages": stages}
    for s in stages:
        print(f"{s['stage']:24s} wall {s['wall_s']:7.2f}  cpu {s['cpu_s']:7.2f}  rss {s['rss_start_gb']:6.2f} "
              f"→ peak {s['peak_gb']:6.2f} GB (+{s['grew_gb']:.2f})")
    print("total", total)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
