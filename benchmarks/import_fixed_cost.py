"""The fixed cost of `kernelscope import --no-report` on small real serving traces: whole processes, wall and CPU
time (user+system, resource.getrusage of children), and the time spent importing modules (`python -X importtime`,
summed over every module), this tree beside --old's, calls alternated, medians of --repeats.

    python benchmarks/import_fixed_cost.py --old /tmp/before/src [--repeats 7]

Traces: the SGLang and vLLM serving windows committed under tests/data/public/tracelens (AMD-AGI/TraceLens test
data, MIT). Python's bytecode caches are written first for both trees (compileall), as on an installed machine.
Results go to benchmarks/results/import-fixed-cost-<date>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from _provenance import commit  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
TRACES = [ROOT / "tests/data/public/tracelens" / name for name in (
    "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz",
    "inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz",
    "inference__vllm_prefilldecode_piecewise__graph_execution.json.gz")]
_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|")


def call(src: Path, trace: Path, importtime: bool) -> dict:
    out = Path(tempfile.mkdtemp(prefix="ks-fixed-")) / "run"
    env = dict(os.environ, PYTHONPATH=str(src))
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "kernelscope", "-q", "import",
           str(trace), "--no-report", "--out", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(out.parent, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"import of {trace.name} failed: {proc.stderr[-2000:]}")
    result = {"wall_s": round(wall, 3),
              "cpu_s": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 3)}
    if importtime:
        result["import_s"] = round(sum(int(m.group(1)) for m in _IMPORT_LINE.finditer(proc.stderr)) / 1e6, 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", type=Path, required=True, help="the source tree before (its src/)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    trees = {"kernelscope": ROOT / "src", "before": args.old}
    for src in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True, stdout=subprocess.DEVNULL)
    load = os.getloadavg()
    results = {}
    for trace in TRACES:
        runs: dict[str, list[dict]] = {label: [] for label in trees}
        for repeat in range(args.repeats + 1):  # the first round warms the page cache and is not kept
            for label, src in trees.items():
                measured = call(src, trace, importtime=repeat % 2 == 1)
                if repeat:
                    runs[label].append(measured)
        entry = {"bytes": trace.stat().st_size, "runs": runs}
        for label, measured in runs.items():
            entry[label] = {key: statistics.median(r[key] for r in measured if key in r)
                            for key in ("wall_s", "cpu_s", "import_s")}
        entry["before_over_after"] = {key: round(entry["before"][key] / entry["kernelscope"][key], 2)
                                      for key in ("wall_s", "cpu_s", "import_s")}
        results[trace.name] = entry
        print(trace.name, {k: entry[k] for k in ("kernelscope", "before", "before_over_after")})
    record = {"benchmark": "import-fixed-cost", "date": date.today().isoformat(), "commit": commit(),
              "machine": {"cores": os.cpu_count(), "load_average_start": load, "load_average_end": os.getloadavg()},
              "method": "whole `python -m kernelscope -q import TRACE --no-report` processes, the two trees "
                        "alternated; import_s from every other call, run with -X importtime",
              "traces": results}
    out = args.out or ROOT / "benchmarks/results" / f"import-fixed-cost-{date.today().isoformat()}.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(out)


if __name__ == "__main__":
    main()
