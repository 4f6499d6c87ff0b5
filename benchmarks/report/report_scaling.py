"""Whole-process `kernelscope report RUN` at several trace sizes, and `import TRACE` with and without its report
(and with a report of tables and text alone, `--figure-formats none`):
seconds (medians of repeats, inputs alternated, nothing sampling the processes meanwhile) and peak RSS (the process,
the fork server and the figure helpers, sampled in one more run of each).

    python benchmarks/report/report_scaling.py --sizes 100,300,1000,2000 --repeats 3 [--runs DIR,...]

Traces are built once under --work by benchmarks/make_big_trace.py (as benchmarks/ingest_scaling.py builds them)
and imported once without a report into --work/run-<MB>; `report` then remakes that run's report each time.
--runs adds run directories measured by `report` only (a copy of each, so the originals are left as they were).
Results go to benchmarks/results/ as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: ingest_scaling, _provenance
from _provenance import commit  # noqa: E402
from ingest_scaling import build, whole_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Each import measured: without a report, with it, and with a report of tables and text alone.
IMPORT_MODES = (("import --no-report", ["--no-report"]), ("import", []),
                ("import --figure-formats none", ["--figure-formats", "none"]))


def launches(run: Path) -> int:
    import polars as pl

    return pl.scan_parquet(run / "kernels.parquet").select(pl.len()).collect().item()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100,300,1000", help="trace sizes in MB (default 100,300,1000)")
    parser.add_argument("--runs", default="", help="run directories also measured by `report` (comma-separated)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "ks-ingest")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    tree = ROOT / "src"
    traces = {int(mb): build(args.work, int(mb)) for mb in args.sizes.split(",") if mb}
    runs: dict[str, Path] = {}
    for mb, trace in traces.items():
        run = args.work / f"run-{mb}"
        shutil.rmtree(run, ignore_errors=True)
        whole_process(["import", str(trace), "--no-report", "--out", str(run)], tree)
        runs[f"{mb} MB trace"] = run
    for given in filter(None, args.runs.split(",")):
        copy = args.work / f"run-given-{Path(given).name}"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(given, copy)
        runs[f"run {Path(given).name}"] = copy
    measured: dict[str, list[dict[str, float]]] = {}
    memory = {label: whole_process(["report", str(run)], tree)["peak_rss_bytes"] for label, run in runs.items()}
    with tempfile.TemporaryDirectory(prefix="ks-report-") as tmp:
        for _ in range(args.repeats):  # alternate: drifts hit every input alike
            for label, run in runs.items():
                measured.setdefault(f"report|{label}", []).append(
                    whole_process(["report", str(run)], tree, sample_memory=False))
            for mb, trace in traces.items():
                for mode, extra in IMPORT_MODES:
                    out = Path(tmp) / f"{mb}-{len(extra)}"
                    shutil.rmtree(out, ignore_errors=True)
                    measured.setdefault(f"{mode}|{mb}", []).append(
                        whole_process(["import", str(trace), *extra, "--out", str(out)], tree, sample_memory=False))

    def median(key: str) -> float:
        return statistics.median(r["seconds"] for r in measured[key])

    reports = [{"input": label, "launches": launches(run), "seconds": median(f"report|{label}"),
                "peak_rss_bytes": memory[label], "runs": measured[f"report|{label}"]} for label, run in runs.items()]
    imports = []
    for mb, trace in traces.items():
        plain, full, text = (median(f"{mode}|{mb}") for mode, _ in IMPORT_MODES)
        imports.append({"trace_bytes": trace.stat().st_size, "no_report_seconds": plain, "with_report_seconds": full,
                        "with_report_over_no_report": full / plain,
                        "no_figures_seconds": text, "no_figures_over_no_report": text / plain,
                        "runs": {mode: measured[f"{mode}|{mb}"] for mode, _ in IMPORT_MODES}})
    result = {
        "what": "whole-process `kernelscope -q report RUN`, and `import TRACE` with and without its report, and "
                "with a report without figures (medians of repeats, inputs alternated)",
        "date": date.today().isoformat(), "commit": commit(), "machine": platform.node(), "cores": os.cpu_count(),
        "load_average_at_start": os.getloadavg(), "repeats": args.repeats, "tree": str(tree),
        "reports": reports, "imports": imports,
    }
    out = args.out or ROOT / "benchmarks" / "results" / f"report-scaling-{date.today().isoformat()}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'report of':24} {'launches':>10} {'s':>6} {'peak GB':>8}")
    for r in reports:
        print(f"{r['input']:24} {r['launches']:10,} {r['seconds']:6.2f} {r['peak_rss_bytes'] / 1e9:8.2f}")
    print(f"{'import of':24} {'no report s':>12} {'report s':>9} {'ratio':>6} {'no figures s':>13} {'ratio':>6}")
    for r in imports:
        print(f"{r['trace_bytes'] / 1e6:8.0f} MB trace{'':10} {r['no_report_seconds']:12.2f} "
              f"{r['with_report_seconds']:9.2f} {r['with_report_over_no_report']:6.2f} "
              f"{r['no_figures_seconds']:13.2f} {r['no_figures_over_no_report']:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
