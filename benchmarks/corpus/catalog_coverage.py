"""The kernel catalog's coverage of every trace of the corpus (benchmarks/corpus/manifest.toml, rebuilt by
build_corpus.py): per file, the share of its kernel time whose kernel has a known library and a category other than
`other`, and the names that have not, by time. Lighter than check_corpus.py (reads the files, no reference, no
report). Writes one JSON result.

    python benchmarks/corpus/catalog_coverage.py [--corpus /work/corpus] [--out benchmarks/results/…json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from datetime import date
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from kernelscope.analyze.costs.naming import with_kernel_catalog  # noqa: E402
from kernelscope.errors import UserError  # noqa: E402
from kernelscope.load.sources import read_trace  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("/work/corpus"))
    parser.add_argument("--out", type=Path, default=ROOT / f"benchmarks/results/catalog-coverage-{date.today()}.json")
    args = parser.parse_args()
    manifest = tomllib.loads((ROOT / "benchmarks/corpus/manifest.toml").read_text())
    files, totals = [], {}
    for entry in manifest["trace"]:
        if entry.get("expect_refusal"):
            continue
        try:
            kernels = read_trace(args.corpus / entry["path"]).kernels.filter(pl.col("kind") == "kernel")
        except UserError as exc:
            files.append({"path": entry["path"], "refused": str(exc)})
            continue
        if kernels.height == 0:
            continue
        named = with_kernel_catalog(kernels)
        total = int(named["dur_ns"].sum())
        unknown = named.filter(~((pl.col("library") != "unknown") & (pl.col("category") != "other")))
        missing = unknown.group_by("name").agg(pl.col("dur_ns").sum()).sort("dur_ns", descending=True).head(5)
        coverage = 1 - int(unknown["dur_ns"].sum()) / total if total else None
        files.append({"path": entry["path"], "vendor": entry.get("vendor"), "kernel_ns": total,
                      "catalog_coverage": coverage,
                      "top_unnamed": [[n[:160], int(d)] for n, d in missing.iter_rows()]})
        if coverage is not None:
            t = totals.setdefault(entry.get("vendor"), [0, 0.0])
            t[0] += total
            t[1] += total * coverage
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    below = [f["path"] for f in files if f.get("vendor") in ("nvidia", "amd") and (f.get("catalog_coverage") or 0) < 0.99]
    summary = {"time_weighted": {v: round(c / t, 5) for v, (t, c) in totals.items() if t},
               "nvidia_amd_files_below_99pct": below}
    result = {"benchmark": "catalog coverage of the corpus", "machine": "2-core CPU dev machine",
              "date": str(date.today()), "commit": commit.strip(), "summary": summary, "files": files}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
