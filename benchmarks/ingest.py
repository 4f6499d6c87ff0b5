"""Ingest benchmark: load + attribute a large Kineto trace with kernelscope, and load the same trace with
Holistic Trace Analysis (HTA), in the same run; report MB/s, peak memory and the ratio.

    python benchmarks/ingest.py [--trace big.json] [--hta-python .venv-hta/bin/python]

Without --trace, a trace of about 520 MB is built once from a committed device capture
(benchmarks/make_big_trace.py). HTA pulls heavy dependencies (jupyterlab), so it lives in its own venv:
    python -m venv .venv-hta && .venv-hta/bin/pip install HolisticTraceAnalysis==0.5.0
Each tool runs in a fresh process; peak memory is the peak summed RSS of that process and its children,
sampled every 20 ms (psutil). Results go to benchmarks/results/ as JSON.
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
from _process import peak_rss_until_exit  # benchmarks/ is on sys.path when run as a script
from _provenance import commit  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]

OURS = """
import json, sys, time
from pathlib import Path
from kernelscope.load.kineto import load_kineto
from kernelscope.analyze.attribution.attribution import attribute, attribution_coverage
if __name__ == "__main__":
    t0 = time.perf_counter()
    tables = load_kineto(Path(sys.argv[1]))
    t1 = time.perf_counter()
    kernels, ops = attribute(tables)
    t2 = time.perf_counter()
    print(json.dumps({"load_s": t1 - t0, "attribute_s": t2 - t1, "seconds": t2 - t0, "kernels": kernels.height,
                      "ops": ops.height, "events": tables.meta["event_count"],
                      "attribution_coverage": attribution_coverage(kernels)}))
"""

HTA = """
import json, sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
if __name__ == "__main__":
    t0 = time.perf_counter()
    analysis = TraceAnalysis(trace_dir=sys.argv[1])
    t1 = time.perf_counter()
    trace = analysis.t.get_trace(0)
    print(json.dumps({"seconds": t1 - t0, "rows": int(trace.shape[0])}))
"""


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    started = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = peak_rss_until_exit(proc)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result.update(peak_rss_bytes=peak, process_wall_s=time.perf_counter() - started)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, help="Kineto JSON to load (default: build ~520 MB once)")
    parser.add_argument("--mb", type=float, default=520.0, help="size of the built trace (default 520)")
    parser.add_argument("--repeats", type=int, default=3, help="kernelscope runs; the median is kept (default 3)")
    parser.add_argument("--hta-python", help="python of a venv with HolisticTraceAnalysis (default: skip HTA)")
    parser.add_argument("--hta-repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, help="results JSON (default benchmarks/results/ingest-<date>.json)")
    args = parser.parse_args()

    trace = args.trace
    if trace is None:
        trace = Path(tempfile.gettempdir()) / f"kernelscope-bench-{int(args.mb)}mb.json"
        if not trace.exists():
            print(f"building {trace} …", file=sys.stderr)
            subprocess.run([sys.executable, str(ROOT / "benchmarks/make_big_trace.py"), str(trace),
                            "--mb", str(args.mb)], check=True)
    size = trace.stat().st_size
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))

    ours = [run_measured([sys.executable, "-c", OURS, str(trace)], env) for _ in range(args.repeats)]
    best = sorted(ours, key=lambda r: r["seconds"])[len(ours) // 2]
    seconds = statistics.median(r["seconds"] for r in ours)
    peak = max(r["peak_rss_bytes"] for r in ours)
    result = {
        "benchmark": "ingest",
        "date": date.today().isoformat(),
        "commit": commit(),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "memory_bytes": psutil.virtual_memory().total, "python": platform.python_version()},
        "trace": {"path": str(trace), "bytes": size, "events": best["events"], "kernels": best["kernels"],
                  "ops": best["ops"]},
        "kernelscope": {
            "runs": ours,
            "median_seconds": seconds,
            "mb_per_s": size / 1e6 / seconds,
            "peak_rss_bytes": peak,
            "peak_rss_over_trace": peak / size,
        },
        "goals": {"mb_per_s": 100, "peak_rss_over_trace": 3, "speedup_over_hta": 5},
    }
    if args.hta_python:
        with tempfile.TemporaryDirectory() as tmp:
            os.symlink(trace.resolve(), Path(tmp) / "rank0.json")
            hta = [run_measured([args.hta_python, "-c", HTA, tmp]) for _ in range(args.hta_repeats)]
        hta_seconds = statistics.median(r["seconds"] for r in hta)
        result["hta"] = {"version": "0.5.0", "runs": hta, "median_seconds": hta_seconds,
                         "mb_per_s": size / 1e6 / hta_seconds,
                         "peak_rss_bytes": max(r["peak_rss_bytes"] for r in hta)}
        result["speedup_over_hta"] = hta_seconds / seconds
    out = args.out or ROOT / "benchmarks/results" / f"ingest-{date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("kernelscope",)}["kernelscope"] | {"runs": len(ours)}, indent=2))
    if "hta" in result:
        print(f"HTA {result['hta']['median_seconds']:.1f} s; kernelscope is {result['speedup_over_hta']:.1f}x faster")
    print(out)


if __name__ == "__main__":
    main()
