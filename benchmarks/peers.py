"""Side by side on one trace: kernelscope's whole `import --no-report` process against Holistic Trace Analysis
(load + GPU kernel breakdown) and TraceLens (tree + GPU timeline), each a fresh process on the same machine.

    python benchmarks/peers.py --trace big.json [--hta-python .venv-hta/bin/python]
                               [--tracelens-python .venv-tl/bin/python] [--repeats 3] [--peer-repeats 1]

The peers live in their own virtual environments (their dependencies are heavy and pinned differently):
    python -m venv .venv-hta && .venv-hta/bin/pip install HolisticTraceAnalysis==0.5.0 psutil
    python -m venv .venv-tl && .venv-tl/bin/pip install <TraceLens checkout> psutil
(TraceLens from its GitHub source: the PyPI package of that name is another project.) Wall time is the whole
process, start-up included, for every tool; peak memory is the peak summed RSS of the process and its children
(psutil, sampled every 20 ms). Rounds alternate the tools, so drift hits all alike. Writes one JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path

import psutil
from _provenance import commit  # benchmarks/ is on sys.path when run as a script
from ingest import run_measured

ROOT = Path(__file__).resolve().parents[1]

OURS = """
import json, subprocess, sys, time
t0 = time.perf_counter()
subprocess.run([sys.executable, "-m", "kernelscope", "-q", "import", sys.argv[1], "--no-report", "--out", sys.argv[2]],
               check=True, stdout=subprocess.DEVNULL)
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""

HTA = """
import json, logging, os, shutil, sys, tempfile, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
folder = tempfile.mkdtemp()
os.symlink(os.path.abspath(sys.argv[1]), os.path.join(folder, "rank0.json"))
analysis = TraceAnalysis(trace_dir=folder)
kernel_types, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
shutil.rmtree(folder)
print(json.dumps({"seconds": time.perf_counter() - t0, "kernel_rows": int(kernels.shape[0])}))
"""

TRACELENS = """
import json, sys, time
t0 = time.perf_counter()
from TraceLens import TreePerfAnalyzer
analyzer = TreePerfAnalyzer.from_file(sys.argv[1])
timeline = analyzer.get_df_gpu_timeline()
print(json.dumps({"seconds": time.perf_counter() - t0, "timeline_rows": int(timeline.shape[0])}))
"""


def _summary(runs: list[dict], size: int) -> dict:
    seconds = statistics.median(r["process_wall_s"] for r in runs)
    peak = max(r["peak_rss_bytes"] for r in runs)
    return {"runs": runs, "median_process_s": seconds, "mb_per_s": size / 1e6 / seconds, "peak_rss_bytes": peak,
            "peak_rss_over_trace": peak / size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, required=True, help="Kineto JSON trace")
    parser.add_argument("--hta-python", help="python of a venv with HolisticTraceAnalysis")
    parser.add_argument("--tracelens-python", help="python of a venv with TraceLens")
    parser.add_argument("--repeats", type=int, default=3, help="kernelscope runs (median kept)")
    parser.add_argument("--peer-repeats", type=int, default=1, help="runs of each peer")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    size = args.trace.stat().st_size
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    tools = {"kernelscope": ([sys.executable, "-c", OURS], args.repeats)}
    if args.hta_python:
        tools["hta"] = ([args.hta_python, "-c", HTA], args.peer_repeats)
    if args.tracelens_python:
        tools["tracelens"] = ([args.tracelens_python, "-c", TRACELENS], args.peer_repeats)
    runs: dict[str, list[dict]] = {name: [] for name in tools}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(max(count for _, count in tools.values())):
            for name, (command, count) in tools.items():
                if round_ < count:
                    extra = [str(Path(scratch) / f"run{round_}")] if name == "kernelscope" else []
                    runs[name].append(run_measured([*command, str(args.trace), *extra],
                                                   env if name == "kernelscope" else None))
                    print(f"{name}: {runs[name][-1]['process_wall_s']:.1f} s", file=sys.stderr, flush=True)
    result = {
        "benchmark": "peers", "date": date.today().isoformat(), "commit": commit(),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "memory_bytes": psutil.virtual_memory().total, "python": platform.python_version(),
                    "load_average_at_end": os.getloadavg()},
        "trace": {"path": str(args.trace), "bytes": size},
        "what": {"kernelscope": "`kernelscope -q import TRACE --no-report` (read, attribute, write the run)",
                 "hta": "HolisticTraceAnalysis 0.5.0: TraceAnalysis(trace_dir) + get_gpu_kernel_breakdown()",
                 "tracelens": "TraceLens (GitHub source): TreePerfAnalyzer.from_file + get_df_gpu_timeline()"},
        "tools": {name: _summary(tool_runs, size) for name, tool_runs in runs.items()},
    }
    ours = result["tools"]["kernelscope"]["median_process_s"]
    result["kernelscope_faster_by"] = {name: summary["median_process_s"] / ours
                                       for name, summary in result["tools"].items() if name != "kernelscope"}
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({name: round(s["median_process_s"], 2) for name, s in result["tools"].items()}),
          json.dumps(result["kernelscope_faster_by"]))


if __name__ == "__main__":
    main()
