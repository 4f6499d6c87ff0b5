"""Every step's critical path on every Kineto trace of the corpus (benchmarks/corpus/manifest.toml, rebuilt by
build_corpus.py) against the step's wall time the file itself gives (tests/step_reference.py, plain json): the
share of steps whose path adds up to their wall time within 1%, per trace and over all. The markers a trace's steps
come from are the ones kernelscope found (run.json's step source) mapped to step_reference's families; a trace
whose steps come from markers step_reference does not read is counted apart. Each file is one run, and the
corpus's multi-rank groups (PARAM's 8-rank DLRM, HTA's two sampled ranks) are also checked as one run each.
Writes one JSON result.

    python benchmarks/critical_path/corpus_paths.py [--corpus /work/corpus] [--out benchmarks/results/critical-path-corpus-DATE.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import tomllib
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from kernelscope.analyze.attribution.graph_replays import attribute_graph_replays  # noqa: E402
from kernelscope.analyze.costs.kernel_costs import with_costs_and_names  # noqa: E402
from kernelscope.analyze.paths.path_tables import run_critical_paths  # noqa: E402
from kernelscope.analyze.ranks.ranks import combine_calls, combine_ranks, rank_clock_offsets, trace_ranks  # noqa: E402
from kernelscope.commands.importers.rank_files import read_rank  # noqa: E402
from kernelscope.contracts.run import Run  # noqa: E402
from kernelscope.contracts.run_info import RunInfo  # noqa: E402
from kernelscope.errors import UserError  # noqa: E402
from tests.step_reference import step_walls  # noqa: E402

# kernelscope's step sources (docs/importing.md) → step_reference's marker families.
FAMILIES = {"kernelscope ranges": "ks", "ProfilerStep#N ranges": "profiler_step",
            "execute annotations (vLLM, SGLang)": "execute", "execute annotations (vLLM, older)": "execute",
            "step annotations (SGLang)": "execute", "model forwards (top-level nn.Module frames)": "forwards",
            "embedding lookups (one per forward)": "lookups", "embedding lookups and compiled-graph calls": "lookups",
            "none": "run"}
GROUPS = [[f"param/dlrm_kineto/worker{r}" for r in range(8)],
          ["hta/tests/data/trace_filter/sampled_rank-0", "hta/tests/data/trace_filter/sampled_rank-1"]]


def check(paths: list[Path]) -> dict:
    started = time.perf_counter()
    try:
        ranks = [read_rank(str(p), workers=1) for p in paths]
    except UserError as exc:
        return {"refused": str(exc)}
    metas = [r.meta for r in ranks]
    offsets = rank_clock_offsets([m.origin_us for m in metas], [m.base_time_ns for m in metas])
    numbers = trace_ranks([m.distributed_info for m in metas])
    kernels, ops = combine_ranks([(r.kernels, r.ops) for r in ranks], offsets, numbers)
    kernels, _ = attribute_graph_replays(kernels)
    run = with_costs_and_names(Run(info=RunInfo(source="import", schema_version=1), kernels=kernels, ops=ops,
                                   calls=combine_calls([r.calls for r in ranks], offsets, numbers)))
    path = run_critical_paths(run)
    seconds = time.perf_counter() - started
    if path is None:
        return {"no_timeline": True}
    sources = {r.sources.phase for r in ranks}
    family = FAMILIES.get(sources.pop()) if len(sources) == 1 else None
    steps = path.steps.sort("end_ns", "start_ns")
    if steps.height == 1 and steps["step"][0] is None and steps["phase"][0] == "unknown":
        family = "run"  # markers found, but none held work: the whole run is the one step
    row = {"steps": steps.height, "seconds": round(seconds, 3), "step_source": sorted({r.sources.phase for r in ranks}),
           "ranks_on_path": int(steps["ranks_on_path"].max()),
           "shares": {c: round(float(steps[f"{c}_ns"].sum() / max(steps["path_ns"].sum(), 1)), 4)
                      for c in ("compute", "communication", "wait", "launch", "host")}}
    if family is None:
        return {**row, "unchecked": "steps from markers the reference does not read"}
    walls = step_walls(paths, family)
    if len(walls) != steps.height:
        return {**row, "family": family, "reference_steps": len(walls), "within_1pct": 0}
    errors = [abs(p - w) / w for p, w in zip(steps["path_ns"].to_list(), walls, strict=True)]
    return {**row, "family": family, "reference_steps": len(walls), "within_1pct": sum(e <= 0.01 for e in errors),
            "max_error": max(errors)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=Path("/work/corpus"))
    parser.add_argument("--out", type=Path, default=ROOT / f"benchmarks/results/critical-path-corpus-{date.today()}.json")
    args = parser.parse_args()
    manifest = tomllib.loads((ROOT / "benchmarks/corpus/manifest.toml").read_text())
    runs = [[entry["path"]] for entry in manifest["trace"] if not entry.get("expect_refusal")]
    paths = {entry["path"] for entry in manifest["trace"]}
    for group in GROUPS:
        members = [p for prefix in group for p in sorted(paths) if p.startswith(prefix)]
        if len(members) == len(group):
            runs.append(members)
    rows = []
    for members in runs:
        files = [args.corpus / m for m in members]
        if not all(f.is_file() for f in files):
            rows.append({"files": members, "missing": True})
            continue
        row = {"files": members, **check(files)}
        rows.append(row)
        print(f"{row.get('within_1pct', '-')}/{row.get('steps', '-')} {members[0]}"
              f"{f' (+{len(members) - 1} ranks)' if len(members) > 1 else ''}", flush=True)
    checked = [r for r in rows if "within_1pct" in r]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    summary = {
        "date": str(date.today()), "commit": commit.strip(), "runs": len(rows),
        "runs_checked": len(checked), "steps_checked": sum(r["steps"] for r in checked),
        "steps_within_1pct": sum(r["within_1pct"] for r in checked),
        "worst_error": max((r.get("max_error", 1.0) for r in checked), default=None),
        "refused": sum(1 for r in rows if r.get("refused")), "no_timeline": sum(1 for r in rows if r.get("no_timeline")),
        "unchecked": [r["files"][0] for r in rows if r.get("unchecked")],
        "crossing_ranks": [r["files"][0] for r in rows if r.get("ranks_on_path", 1) > 1],
    }
    args.out.write_text(json.dumps({"summary": summary, "runs": rows}, indent=1, default=str) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
