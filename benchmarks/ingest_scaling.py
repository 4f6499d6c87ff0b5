"""Whole-process `kernelscope import --no-report` at several trace sizes and in three JSON layouts: seconds,
MB/s and peak RSS (the process and its helpers), medians of repeats, runs alternated across inputs.

    python benchmarks/ingest_scaling.py --sizes 100,300,1000,2000 --layouts-at 300 --repeats 3

Traces are built once under --work by benchmarks/make_big_trace.py (decode steps of a committed H200 capture,
repeated): as written (Kineto's own layout, one event per line), indented (json.dump indent=2: every key on its
own line) and compact (no whitespace: events joined by '},{'). --tiny N adds a trace of N tiny events (an op, its
launch and its kernel per step, ~110 bytes each: the per-event worst case). --old DIR measures a second source tree
(DIR/kernelscope, e.g. `git archive HEAD src | tar -x -C old` → old/src) on the same inputs, alternating. Results go
to benchmarks/results/ as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import psutil
from _provenance import commit  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]


def build(work: Path, mb: int) -> Path:
    path = work / f"trace-{mb}mb.json"
    if not path.exists():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_big_trace.py"), str(path), "--mb", str(mb)],
                       check=True, stdout=subprocess.DEVNULL)
    return path


def relayout(source: Path, layout: str) -> Path:
    """The same trace re-written indented or compact (events streamed out one at a time)."""
    path = source.with_name(f"{source.stem}-{layout}.json")
    if path.exists():
        return path
    with source.open(encoding="utf-8") as f:
        trace = json.load(f)
    events = trace.pop("traceEvents")
    with path.open("w", encoding="utf-8") as out:
        if layout == "indented":
            head = json.dumps(trace, indent=2)[:-2]
            out.write(head + ',\n  "traceEvents": [\n')
            for i, e in enumerate(events):
                text = json.dumps(e, indent=2).replace("\n", "\n    ")
                out.write(("    " if i == 0 else ",\n    ") + text)
            out.write("\n  ]\n}\n")
        else:
            out.write(json.dumps(trace, separators=(",", ":"))[:-1] + ',"traceEvents":[')
            out.write(",".join(json.dumps(e, separators=(",", ":")) for e in events))
            out.write("]}")
    return path


def build_tiny(work: Path, events: int) -> Path:
    """A trace of `events` tiny events: per step a CPU op, its launch and its kernel, tied by ids."""
    path = work / f"tiny-{events}.json"
    if path.exists():
        return path
    steps = events // 3
    with path.open("w", encoding="utf-8") as f:
        f.write('{"schemaVersion": 1, "traceEvents": [\n')
        for i in range(steps):
            ts = 1_000_000 + 4 * i
            f.write(f'{{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":{ts},"dur":3,'
                    f'"args":{{"External id":{i}}}}},\n'
                    f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{ts + 1},'
                    f'"dur":1,"args":{{"External id":{i},"correlation":{i}}}}},\n'
                    f'{{"ph":"X","cat":"kernel","name":"add_kernel","pid":0,"tid":7,"ts":{ts + 2},"dur":1,'
                    f'"args":{{"External id":{i},"correlation":{i},"device":0,"stream":7}}}}')
            f.write(",\n" if i < steps - 1 else "\n")
        f.write("]}\n")
    return path


def measure(trace: Path, tree: Path) -> dict[str, float]:
    """One whole-process import: wall seconds and the peak RSS summed over the process and its children."""
    with tempfile.TemporaryDirectory(prefix="ks-ingest-") as tmp:
        return whole_process(["import", str(trace), "--no-report", "--out", os.path.join(tmp, "run")], tree)


def whole_process(arguments: list[str], tree: Path, sample_memory: bool = True) -> dict[str, float]:
    """`kernelscope -q ARGUMENTS` run from `tree`: wall seconds and the peak RSS summed over the process and its
    children (helpers and the fork server they start from), sampled every 20 ms. Without `sample_memory`, seconds
    only: on 2 cores the sampling itself (walking the process tree 50 times a second) costs the command time."""
    started = time.perf_counter()
    proc = psutil.Popen([sys.executable, "-m", "kernelscope", "-q", *arguments], stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(tree)})
    if not sample_memory:
        proc.wait()
    peak = 0
    while proc.poll() is None:
        try:
            rss = proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"kernelscope {' '.join(arguments)} failed: {proc.stderr.read().decode()[-500:]}")
    return {"seconds": seconds, **({"peak_rss_bytes": peak} if sample_memory else {})}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,300,1000", help="trace sizes in MB (default 100,300,1000)")
    parser.add_argument("--layouts-at", type=int, default=300, help="size (MB) also measured indented and compact")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tiny", type=int, default=0, help="also a trace of this many tiny events (e.g. 5000000)")
    parser.add_argument("--old", type=Path, help="a second source tree measured alternately (its src directory)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ks-ingest")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    inputs: list[tuple[str, int, Path]] = [("kineto", mb, build(args.work, mb)) for mb in sizes]
    if args.layouts_at:
        base = build(args.work, args.layouts_at)
        inputs += [(layout, args.layouts_at, relayout(base, layout)) for layout in ("indented", "compact")]
    if args.tiny:
        tiny = build_tiny(args.work, args.tiny)
        inputs.append(("tiny", round(tiny.stat().st_size / 1e6), tiny))
    trees = {"new": ROOT / "src", **({"old": args.old.resolve()} if args.old else {})}
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(t, str(p)): [] for t in trees for _, _, p in inputs}
    for _ in range(args.repeats):  # alternate: drifts hit every input and tree alike
        for _, _, path in inputs:
            for label, tree in trees.items():
                runs[label, str(path)].append(measure(path, tree))
    rows = []
    for label in trees:
        for layout, mb, path in inputs:
            size = path.stat().st_size
            measured = runs[label, str(path)]
            seconds = statistics.median(r["seconds"] for r in measured)
            peak = statistics.median(r["peak_rss_bytes"] for r in measured)
            rows.append({"tree": label, "layout": layout, "target_mb": mb, "bytes": size, "seconds": seconds,
                         "mb_per_s": size / 1e6 / seconds, "peak_rss_bytes": peak, "rss_per_trace_byte": peak / size,
                         "runs": measured})
    plain = sorted((r for r in rows if r["layout"] == "kineto" and r["tree"] == "new"), key=lambda r: r["bytes"])
    growth = None
    if len(plain) >= 2:
        first, last = plain[0], plain[-1]
        growth = (last["peak_rss_bytes"] - first["peak_rss_bytes"]) / (last["bytes"] - first["bytes"])
    result = {
        "what": "whole-process `kernelscope import TRACE --no-report` (median of repeats, alternated)",
        "date": date.today().isoformat(), "commit": commit(), "machine": platform.node(),
        "cpu": next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), platform.processor()),
        "cores": os.cpu_count(), "load_average_at_start": os.getloadavg(), "repeats": args.repeats,
        "trees": {label: str(tree) for label, tree in trees.items()},
        "rows": rows, "rss_growth_per_extra_trace_byte": growth,
    }
    out = args.out or ROOT / "benchmarks" / "results" / f"ingest-scaling-{date.today().isoformat()}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'tree':4} {'layout':9} {'MB':>7} {'s':>7} {'MB/s':>7} {'peak GB':>8} {'×trace':>7}")
    for r in rows:
        print(f"{r['tree']:4} {r['layout']:9} {r['bytes'] / 1e6:7.0f} {r['seconds']:7.2f} {r['mb_per_s']:7.0f} "
              f"{r['peak_rss_bytes'] / 1e9:8.2f} {r['rss_per_trace_byte']:7.2f}")
    if growth is not None:
        print(f"peak RSS grows {growth:.2f} GB per extra GB of trace (new tree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
