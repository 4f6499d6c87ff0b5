"""Import every trace of the corpus (benchmarks/corpus/manifest.toml, rebuilt by build_corpus.py) and compare it
with what the file holds, computed independently (tests/trace_reference.py): launches, device time,
per-kernel-name totals, busy time (the union of the file's intervals), the launch calls' mean and median, the idle
gaps (count, total, the largest, host wait) and the integrity audit's counts (overlaps on one stream and those PDL
explains, events outside the window, launches without kernels and kernels without launches, one-ended flows, clock
jumps, silent devices, truncation, events left out); also the catalog's coverage of kernel time, and the Perfetto
export's nesting: every trace imported and exported, and on every track of the exported file the slices nest. With --reports-twice, each
trace's report (tables and text, no figures) is also made twice, under two hash seeds and Polars thread counts, and
the files compared byte for byte: ties must be broken the same way every run. Writes one JSON result.

    python benchmarks/corpus/check_corpus.py [--corpus /work/corpus] [--reports-twice] [--only TEXT]
        [--out benchmarks/results/corpus-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from datetime import date
from pathlib import Path

import msgspec
import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from kernelscope.analyze.attribution.attribution import attribute  # noqa: E402
from kernelscope.analyze.costs.naming import with_kernel_catalog  # noqa: E402
from kernelscope.analyze.idle_gaps import idle_gaps  # noqa: E402
from kernelscope.analyze.integrity import audit_trace  # noqa: E402
from kernelscope.analyze.structure.phases import busy_ns, launch_calls  # noqa: E402
from kernelscope.commands.export import export_run  # noqa: E402
from kernelscope.commands.importers.traces import import_traces  # noqa: E402
from kernelscope.errors import UserError  # noqa: E402
from kernelscope.load.sources import read_trace  # noqa: E402
from tests.audit_reference import audit_reference, crossing_slices  # noqa: E402
from tests.nsys_reference import is_sqlite, op_ranges, processes  # noqa: E402
from tests.trace_reference import reference  # noqa: E402

AUDIT_KEYS = ("stream_overlaps", "stream_overlap_ns", "stream_overlaps_pdl", "outside_window", "launches_without_kernel",
              "kernels_without_launch", "flows", "flows_unpaired", "clock_jumps", "devices_named", "devices_silent",
              "unclosed", "dropped_events")


def check(path: Path) -> dict:
    started = time.perf_counter()
    try:
        tables = read_trace(path)
        audit = msgspec.to_builtins(audit_trace(tables))
        kernels, _ = attribute(tables)
    except UserError as exc:
        return {"refused": str(exc)}
    seconds = time.perf_counter() - started
    del tables
    expected_audit = audit_reference(path)
    device = kernels.filter(pl.col("kind") != "cpu_op")
    ref = reference(path)
    ours = {name: (count, total) for name, count, total in
            device.group_by("name").agg(pl.len(), pl.col("dur_ns").sum()).iter_rows()}
    busy = busy_ns(kernels)
    calls = launch_calls(kernels.with_columns(pl.lit("whole trace").alias("phase")))
    ours_calls = calls.row(0)[1:] if calls.height else None
    expected_calls = ref.kernel_launch_calls_ns
    theirs_calls = (statistics.mean(expected_calls), statistics.median(expected_calls)) if expected_calls else None
    named = with_kernel_catalog(device.filter(pl.col("kind") == "kernel"))
    kernel_ns = int(named["dur_ns"].sum())
    known_ns = int(named.filter((pl.col("library") != "unknown") & (pl.col("category") != "other"))["dur_ns"].sum())
    gaps = idle_gaps(kernels.with_columns(pl.lit("whole trace").alias("phase")), top=10)
    return {
        "refused": None,
        "seconds": round(seconds, 3),
        "launches": device.height, "launches_expected": ref.launches,
        "device_ns": int(device["dur_ns"].sum()), "device_ns_expected": ref.device_ns,
        "names_match": ours == ref.by_name,
        # Each busy stretch's two ends are rounded to ns (the file's times are µs with fractions).
        "busy_ns": busy, "busy_ns_expected": ref.busy_ns,
        "busy_match": busy is not None and ref.busy_ns is not None and abs(busy - ref.busy_ns) <= ref.busy_stretches,
        # Mean and median host time of the calls that launched kernels, each once, against the file's own calls.
        "launch_calls": len(expected_calls), "launch_call_mean_median_ns": ours_calls,
        "launch_calls_match": ours_calls == theirs_calls or (ours_calls is not None and theirs_calls is not None and
                                                             all(abs(a - b) <= 1e-9 * max(abs(b), 1)
                                                                 for a, b in zip(ours_calls, theirs_calls, strict=True))),
        # Idle gaps against the gaps between the file's busy stretches (each end rounded: 2 ns a gap).
        "idle_gaps": int(gaps.per_phase["gaps"].sum()) if gaps else 0, "idle_gaps_expected": len(ref.idle_gaps_ns),
        "idle_gaps_match": _gaps_match(gaps, ref),
        "match": device.height == ref.launches and int(device["dur_ns"].sum()) == ref.device_ns
        and ours == ref.by_name,
        # The integrity audit's counts against the same counts made from the file (tests/trace_reference.py).
        "audit": {key: audit[key] for key in expected_audit},
        "audit_match": {key: audit[key] for key in expected_audit} == expected_audit,
        "cpu_only": device.height == 0,
        "kernel_ns": kernel_ns,
        "catalog_coverage": round(known_ns / kernel_ns, 4) if kernel_ns else None,
    }


def perfetto_nesting(path: Path) -> dict:
    """The trace imported and exported for Perfetto, read back with the standard library: slices that cross on a
    track (Perfetto would drop them) and device events that overlap on one lane (none may)."""
    with tempfile.TemporaryDirectory(prefix="ks-perfetto-") as tmp:
        run = import_traces([path], Path(tmp) / "run", Path(tmp), report=False, jobs=1)
        return crossing_slices(export_run(run, "perfetto", Path(tmp) / "trace.json.gz"))


def nsys_checks(path: Path) -> dict:
    """An Nsight Systems export imported as `kernelscope import` imports it: each process's kernels, copies, sets and
    API calls (its rank's, ranks numbered by process id) against the export's own, and each kernel's framework op
    against the emit_nvtx op range open at its launch (tests/nsys_reference.py, sqlite3 only)."""
    expected = processes(path)
    with tempfile.TemporaryDirectory(prefix="ks-nsys-") as tmp:
        run = import_traces([path], Path(tmp) / "run", Path(tmp), report=False, jobs=1)
        kernels = pl.read_parquet(run / "kernels.parquet", columns=["rank", "kind", "op", "correlation", "launch_api"])
        calls = pl.read_parquet(run / "calls.parquet", columns=["rank"])
    kinds = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
    ours: dict[int, dict[str, int]] = {}
    for rank, kind, n in kernels.group_by("rank", "kind").len().iter_rows():
        ours.setdefault(rank, {})[kinds.get(kind, kind)] = n
    # API calls: those that started device work (each once, on its kernels' rows) and the others (calls.parquet).
    launching = kernels.filter(pl.col("launch_api").is_not_null()).group_by("rank").agg(pl.col("correlation").n_unique())
    for rank, n in pl.concat([launching.rename({"correlation": "n"}), calls.group_by("rank").agg(pl.len().alias("n"))],
                             how="vertical_relaxed").group_by("rank").agg(pl.col("n").sum()).iter_rows():
        ours.setdefault(rank, {})["api_calls"] = n
    theirs = {rank: dict(expected[pid]) for rank, pid in enumerate(sorted(expected))}
    ops = op_ranges(path)
    launched = kernels.filter(pl.col("kind") == "kernel")
    ops_expected = dict(ops) if ops else {None: launched.height}
    ops_ours = dict(launched.group_by("op").len().iter_rows())

    def share(counts: dict) -> float | None:
        return round(1 - counts.get(None, 0) / sum(counts.values()), 4) if counts else None

    return {"ranks": len(ours), "ranks_expected": len(theirs), "ranks_match": ours == theirs,
            "op_coverage": share(ops_ours), "op_coverage_expected": share(ops_expected),
            "ops_match": ops_ours == ops_expected}


def reports_repeatable(path: Path) -> list[str] | None:
    """The report files (tables/*.csv, the Markdown of each language) that differ between two imports of `path` under
    different hash seeds and Polars thread counts; None where an import failed."""
    with tempfile.TemporaryDirectory(prefix="ks-twice-") as tmp:
        runs = []
        for seed, threads in (("1", "1"), ("7", "2")):
            run = Path(tmp) / seed
            env = dict(os.environ, PYTHONHASHSEED=seed, POLARS_MAX_THREADS=threads, PYTHONPATH=str(ROOT / "src"))
            done = subprocess.run([sys.executable, "-m", "kernelscope", "-q", "import", str(path), "--out", str(run),
                                   "--figure-formats", "none"], env=env, capture_output=True)
            if done.returncode:
                return None
            runs.append(run / "report")
        first, second = runs
        files = sorted(str(p.relative_to(first)) for p in first.rglob("*") if p.is_file() and p.suffix in (".csv", ".md"))
        return [name for name in files if (first / name).read_bytes() != (second / name).read_bytes()]


def _gaps_match(gaps, ref) -> bool:
    expected = ref.idle_gaps_ns
    if gaps is None:
        return all(gap <= 2 for gap in expected)
    count, total = int(gaps.per_phase["gaps"].sum()), int(gaps.per_phase["idle_ns"].sum())
    largest = gaps.largest["gap_ns"].to_list()
    wait = gaps.per_phase["host_wait_pct"][0]
    wait_ok = (not ref.gap_with_call_ns or wait is not None
               and abs(wait - 100.0 * ref.gap_host_wait_ns / ref.gap_with_call_ns) <= 0.01)
    return (sum(gap > 2 for gap in expected) <= count <= len(expected)
            and abs(total - sum(expected)) <= 2 * max(count, len(expected))
            and all(abs(a - b) <= 2 for a, b in zip(largest, expected, strict=False)) and wait_ok)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("/work/corpus"))
    parser.add_argument("--out", type=Path, default=ROOT / f"benchmarks/results/corpus-{date.today()}.json")
    parser.add_argument("--only", default="", help="check only the files whose corpus path contains this text")
    parser.add_argument("--reports-twice", action="store_true",
                        help="also make each trace's report twice and compare the files")
    args = parser.parse_args()
    manifest = tomllib.loads((ROOT / "benchmarks/corpus/manifest.toml").read_text())
    rows = []
    for entry in (e for e in manifest["trace"] if args.only in e["path"]):
        path = args.corpus / entry["path"]
        if not path.is_file():
            rows.append({**entry, "missing": True})
            continue
        row = {**entry, **check(path)}
        if not row.get("refused") and is_sqlite(path):
            row.update(nsys_checks(path))
        if not row.get("refused"):
            row["perfetto"] = perfetto_nesting(path)
            row["perfetto_nests"] = row["perfetto"]["crossing"] == 0 and row["perfetto"]["device_overlaps"] == 0
        if args.reports_twice and not row.get("refused"):
            row["report_differences"] = reports_repeatable(path)
        rows.append(row)
        print(f"{'OK ' if row.get('match') or row.get('expect_refusal') and row['refused'] else 'BAD'} "
              f"{entry['path']}: {row.get('refused') or row.get('launches')}", flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    kineto = [r for r in rows if not r.get("expect_refusal") and not r.get("missing")]
    summary = {
        "files": len(rows), "kineto_files": len(kineto),
        "refused": sum(bool(r.get("refused")) for r in kineto),
        "matching": sum(bool(r.get("match")) for r in kineto),
        "busy_matching": sum(bool(r.get("busy_match")) for r in kineto),
        "launch_calls_matching": sum(bool(r.get("launch_calls_match")) for r in kineto),
        "idle_gaps_matching": sum(bool(r.get("idle_gaps_match")) for r in kineto),
        "audit_matching": sum(bool(r.get("audit_match")) for r in kineto),
        "perfetto_nesting": sum(bool(r.get("perfetto_nests")) for r in kineto),
        # Nsight Systems exports: each process's counts and each kernel's emit_nvtx op against the export's own.
        "nsys_files": sum("ranks_match" in r for r in kineto),
        "nsys_ranks_matching": sum(bool(r.get("ranks_match")) for r in kineto),
        "nsys_ops_matching": sum(bool(r.get("ops_match")) for r in kineto),
        "perfetto_slices": sum(r["perfetto"]["slices"] for r in kineto if r.get("perfetto")),
        # What the audit counted over the whole corpus, and in how many files each check found something.
        "audit_totals": {key: sum(r["audit"][key] or 0 for r in kineto if r.get("audit")) for key in AUDIT_KEYS},
        "audit_files": {key: sum(bool(r["audit"][key]) for r in kineto if r.get("audit")) for key in AUDIT_KEYS},
        **({"reports_repeatable": sum(r.get("report_differences") == [] for r in kineto)} if args.reports_twice else {}),
        "sources": sorted({r["source"] for r in rows}),
    }
    for vendor in ("nvidia", "amd"):
        chosen = [r for r in kineto if r.get("vendor") == vendor and r.get("kernel_ns")]
        total = sum(r["kernel_ns"] for r in chosen)
        covered = sum(r["kernel_ns"] * r["catalog_coverage"] for r in chosen)
        summary[f"catalog_coverage_{vendor}"] = round(covered / total, 4) if total else None
    result = {"benchmark": "corpus import check", "machine": "2-core CPU dev machine", "date": str(date.today()),
              "commit": commit.strip(), "summary": summary, "files": rows}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
