"""Held-out accuracy of the what-if projection (docs/whatif.md, "Held-out accuracy").

PAIRS below are runs of one workload measured on two devices. Each pair is held out in turn: the model is fitted on
FIT_ONLY (runs without a counterpart on another device) and every other pair, then each side of the held-out pair
is projected onto the other side's device and compared with that device's measurement, per phase (device time per
step) and per kind of work. The errors of every fold together are the held-out table. The same is done for the model
of the shipped procedure (`after`: data/projection.toml [fit] as fit.sh runs it, refitted on each fold), of the
procedure shipped before (`before`), of variants (ABLATIONS, ONE_SCALE) and for assuming the time does not change
(`unchanged`).

    python3 benchmarks/whatif/held_out.py [--corpus /work/corpus] [--out benchmarks/results/whatif-held-out-DATE.json]
        [--markdown FILE] [--work DIR]

Public traces come from the corpus folder (benchmarks/corpus/build_corpus.py builds it); a pair whose trace is not
there is skipped and listed under `missing`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "whatif"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _provenance import commit  # noqa: E402
from held_out_table import markdown_table, summarise, uncertainty  # noqa: E402

from kernelscope.analyze.costs.kernel_costs import with_costs_and_names  # noqa: E402
from kernelscope.analyze.projection.projection import default_model, projection_inputs, target_from_ceilings  # noqa: E402
from kernelscope.analyze.projection.projection_check import compare, cross_estimate, measured_per_step  # noqa: E402
from kernelscope.analyze.projection.projection_fit import FitRun, fit_model, fitted_target, with_run_latency  # noqa: E402
from kernelscope.load.rundir import read_run  # noqa: E402
from kernelscope.pipeline import run_ceilings  # noqa: E402

TRACELENS = "tracelens/tests/traces"  # AMD-AGI/TraceLens at 171dd74721 (benchmarks/corpus/manifest.toml)


@dataclass(frozen=True)
class Pair:
    name: str
    a: str  # "runs/…": a committed run directory; "kineto/…": a committed trace; "corpus/…": a corpus trace
    b: str
    kind: str  # what the pair tests: "same vendor" or "cross-vendor"


# Same workload, two devices. Our own: transformers' generate, eager, bfloat16, random weights of the named model's
# shape (benchmarks/device/*). Public: TraceLens's test traces of Hugging Face models (one inference pass, bfloat16,
# the same script on an H100 and an MI300X).
PAIRS = [
    Pair("qwen2-0.5b b1 p16 n4", "runs/h200-qwen2-0.5b-ncu", "runs/h100-qwen2-0.5b-ncu", "same vendor"),
    Pair("qwen2-1.5b b1 p128 n64", "runs/h200-qwen2-1.5b-slim", "runs/h100-qwen2-1.5b-b1-slim", "same vendor"),
    Pair("qwen2-1.5b b8 p128 n64", "runs/h200-qwen2-1.5b-b8-slim", "runs/h100-qwen2-1.5b-b8-slim", "same vendor"),
    *(Pair(f"{model.split('__')[0]} (TraceLens)", f"corpus/{TRACELENS}/h100/{model}.json.gz",
           f"corpus/{TRACELENS}/mi300/{model}.json.gz", "cross-vendor")
      for model in ("Qwen_Qwen1.5-0.5B-Chat__1016005", "gaunernst_bert-small-uncased__1016001",
                    "Falconsai_nsfw_image_detection__1016002", "facebook_timesformer-base-finetuned-k400__1016002",
                    "google_owlv2-large-patch14-ensemble__1016001")),
]
# Runs with no counterpart of the same workload on another device: always fitted, never held out.
FIT_ONLY = ["kineto/h200-llama-3-8b-p16-n3.trace.json.gz", "kineto/h200-qwen2-1.5b-b8-p16-n3.trace.json.gz",
            "kineto/h200-deepseek-v3-p16-n3.trace.json.gz", "kineto/h200-qwen2-4l-b4-p128-n3.trace.json.gz",
            "kineto/h200-qwen3moe-2l-b4-p128-n3.trace.json.gz"]
# The fit shipped before 2026-11-23 (one latency scale per device, absolute errors, our own runs only), kept as a
# reference column.
ONE_SCALE = {"grid_points": 40, "efficiency_min": 0.25, "efficiency_max": 1.5, "relative": False,
             "device_scales": True, "scale_by": "device", "roofs": False}
# `before`: the procedure shipped until 2026-12-02 (a latency scale per run, device scales from pairs, the estimate
# from each phase's sums). The variants change the shipped one (`after`) one way each: (name, changes to its [fit],
# estimate kernel by kernel).
BEFORE = ({"roofs": False, "kind_latency": False}, False)
ABLATIONS = [
    ("estimate per kernel only", {"roofs": False, "kind_latency": False}, True),
    ("+ per-kind latency", {"roofs": False, "kind_latency": True}, True),
    ("+ roof shares", {"roofs": True, "kind_latency": False}, True),
    ("after, estimate from the sums", {}, False),
]
RECORDED_VARIANTS = ("after", "before", "unchanged")  # the shipped model and its baselines: their rows in the record
MIN_SHARE = 0.03  # kinds of work under 3% of their phase are left out of the per-kind table


def _location(ref: str, corpus: Path) -> Path:
    kind, _, rest = ref.partition("/")
    return {"runs": ROOT / "tests/data/runs", "kineto": ROOT / "tests/data/kineto", "corpus": corpus}[kind] / rest


def _run_directory(ref: str, corpus: Path, work: Path) -> Path | None:
    path = _location(ref, corpus)
    if not path.exists():
        return None
    if ref.startswith("runs/"):
        return path
    out = work / ref.replace("/", "__")
    if not (out / "summary.json").exists():
        subprocess.run([sys.executable, "-m", "kernelscope", "-q", "import", str(path), "--out", str(out),
                        "--no-report"], check=True, capture_output=True)
    return out


def load(ref: str, corpus: Path, work: Path) -> FitRun | None:
    directory = _run_directory(ref, corpus, work)
    if directory is None:
        return None
    run = with_costs_and_names(read_run(directory, ops=False))
    ceilings = run_ceilings(run.info)
    target = target_from_ceilings(ceilings)
    return FitRun(ref, projection_inputs(run.kernels, run.ncu, default_model()), target, target.l2_bytes,
                  target.family, ceilings.spec.name if ceilings.spec else None)


def project_pair(a: FitRun, b: FitRun, model, pair: Pair, variant: str, per_kernel: bool = True) -> list[dict]:
    rows = []
    for source, other in ((a, b), (b, a)):
        # As the study does: the run's own per-kernel latency, moved by the devices' scales (with_run_latency).
        source_target, other_target = with_run_latency(source.inputs, fitted_target(source, model),
                                                        fitted_target(other, model), model)
        estimate = cross_estimate(source.inputs, source_target, other_target, model, source.l2_bytes, per_kernel)
        if variant == "unchanged":
            estimate = estimate.with_columns(pl.col("measured_ns").alias("estimate_ns"))
        table = compare(estimate, measured_per_step(other.inputs), MIN_SHARE).filter(pl.col("phase") != "unknown")
        if table.is_empty():  # a run without prefill/decode phases: its forward pass is the phase
            table = compare(estimate, measured_per_step(other.inputs), MIN_SHARE)
        for row in table.iter_rows(named=True):
            rows.append({"variant": variant, "pair": pair.name, "kind": pair.kind, "source": source.target.name,
                         "target": other.target.name, **row})
    return rows


def _write_uncertainty(path: Path, spreads: dict) -> None:
    from kernelscope.commands.hw import MODEL_HEADER
    from kernelscope.load.whatif_inputs import model_toml, read_model_file

    data = read_model_file(path)
    data["uncertainty"] = spreads
    path.write_text(model_toml(data, MODEL_HEADER), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, default=Path("/work/corpus"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--uncertainty-into", type=Path,
                        help="a model file (data/projection.toml) whose [uncertainty] the held-out spreads replace")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        fit_only = [r for r in (load(ref, args.corpus, work) for ref in FIT_ONLY) if r is not None]
        pairs, missing = [], []
        for pair in PAIRS:
            a, b = load(pair.a, args.corpus, work), load(pair.b, args.corpus, work)
            (pairs.append((pair, a, b)) if a and b else missing.append(pair.name))
    settings = default_model().fit
    # The shipped model without what it learnt from pairs (device scales, roof shares, per-kind latency), so that no
    # fold sees the held-out pair through it; each fold fits its own.
    base = replace(default_model(), device_latency={}, device_roofs={}, device_kind_latency={}, uncertainty={})
    rows = []
    for i, (pair, a, b) in enumerate(pairs):
        fitting = fit_only + [r for j, (_, x, y) in enumerate(pairs) if j != i for r in (x, y)]
        own = [r for r in fitting if not r.label.startswith("corpus/")]
        fitting_pairs = [(x.label, y.label) for j, (_, x, y) in enumerate(pairs) if j != i]
        # The shipped procedure (data/projection.toml [fit]) as fit.sh fits it: factors on the fold's own runs, device
        # scales from its pairs, the public runs giving their scales only.
        public_runs = {r.label for r in fitting if r.label.startswith("corpus/")}

        def fitted(changes: dict, fitting=fitting, fitting_pairs=fitting_pairs, public_runs=public_runs):
            return fit_model(fitting, base, {**settings, **changes}, bool(settings.get("families", False)),
                             fitting_pairs, public_runs)

        shipped = fitted({})
        rows += project_pair(a, b, shipped, pair, "after") + project_pair(a, b, shipped, pair, "unchanged")
        rows += project_pair(a, b, fitted(BEFORE[0]), pair, "before", BEFORE[1])
        for variant, changes, per_kernel in ABLATIONS:
            model = shipped if not changes else fitted(changes)
            rows += project_pair(a, b, model, pair, variant, per_kernel)
        rows += project_pair(a, b, fit_model(own, base, ONE_SCALE, False), pair, "one scale per device",
                             False)
    result = {
        "date": datetime.now(UTC).date().isoformat(), "commit": commit(), "device": "CPU (projections only)",
        "command": "python3 benchmarks/whatif/held_out.py " + " ".join(sys.argv[1:]),
        "record": args.out.name if args.out else None,
        "fit_only": FIT_ONLY, "pairs": [p.__dict__ for p, _, _ in pairs], "missing": missing,
        "min_share": MIN_SHARE, "summary": summarise(rows), "uncertainty": uncertainty(rows), "projections": rows,
    }
    # Every variant's summary, but the projections themselves only of the shipped model and its two baselines (the
    # other variants' rows would make the record several times larger); one projection a line, readable in a diff.
    kept = [r for r in result["projections"] if r["variant"] in RECORDED_VARIANTS]
    head = json.dumps({k: v for k, v in result.items() if k != "projections"}
                      | {"projections_of": list(RECORDED_VARIANTS)}, indent=1, default=float)
    rows_text = ",\n".join("  " + json.dumps(r, default=float) for r in kept)
    text = head[:-2] + ',\n "projections": [\n' + rows_text + "\n ]\n}"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    if args.uncertainty_into:
        _write_uncertainty(args.uncertainty_into, result["uncertainty"])
    table = markdown_table(result)
    if args.markdown:
        args.markdown.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
