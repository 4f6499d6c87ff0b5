"""Leave-one-out check of the what-if projection model: fit on all committed device runs but one, project the one
left out onto its own device, per phase. Also the cross-GPU check: each H200 run projected onto the H100 (and back)
against the other GPU's run of the same workload. Writes JSON to the path given (default: stdout).

    python3 benchmarks/whatif/leave_one_out.py benchmarks/results/whatif-calibration-2026-11-22/leave_one_out.json
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.hardware import ceilings_for, find_spec
from kernelscope.analyze.projection.projection import (
    Options,
    default_model,
    phase_projection,
    project,
    projection_inputs,
    target_from_ceilings,
)
from kernelscope.analyze.projection.projection_fit import FitRun, calibration_table, fit_factors, with_fit
from kernelscope.load.calibration import find_calibration_matching
from kernelscope.load.rundir import read_run, read_run_info
from kernelscope.pipeline import run_ceilings

ROOT = Path(__file__).resolve().parents[2]
RUNS = ["h200-qwen2-0.5b-ncu", "h100-qwen2-0.5b-ncu", "h200-qwen2-1.5b-slim", "h100-qwen2-1.5b-b1-slim",
        "h100-qwen2-1.5b-b8-slim"]
TRACES = ["llama-3-8b-p16-n3", "qwen2-1.5b-b8-p16-n3", "deepseek-v3-p16-n3"]
PAIRS = [("h200-qwen2-0.5b-ncu", "h100-qwen2-0.5b-ncu"), ("h200-qwen2-1.5b-slim", "h100-qwen2-1.5b-b1-slim")]


def fit_run(path: Path) -> FitRun:
    run = with_costs_and_names(read_run(path))
    target = target_from_ceilings(run_ceilings(run.info))
    return FitRun(path.name, projection_inputs(run.kernels, run.ncu, default_model()), target, target.l2_bytes)


def main() -> None:
    model = default_model()
    settings = model.fit
    with tempfile.TemporaryDirectory() as tmp:
        paths = [ROOT / "tests/data/runs" / r for r in RUNS]
        for trace in TRACES:
            out = Path(tmp) / f"h200-{trace}"
            subprocess.run([sys.executable, "-m", "kernelscope", "-q", "import",
                            str(ROOT / f"tests/data/kineto/h200-{trace}.trace.json.gz"), "--out", str(out),
                            "--no-report"], check=True, capture_output=True)
            paths.append(out)
        runs = [fit_run(p) for p in paths]
    kwargs = {"grid_points": int(settings["grid_points"]), "efficiency_min": float(settings["efficiency_min"]),
              "efficiency_max": float(settings["efficiency_max"])}
    left_out = {}
    for i, run in enumerate(runs):
        fit = fit_factors(runs[:i] + runs[i + 1:], **kwargs)
        scaled = FitRun(run.label, run.inputs, run.target.changed(latency_scale=fit.device_latency.get(run.target.name, 1.0)),
                        run.l2_bytes)
        table = calibration_table([scaled], with_fit(model, fit)).filter(pl.col("phase") != "unknown")
        left_out[run.label] = {r["phase"]: round(r["ratio"], 3) for r in table.iter_rows(named=True)}
    cross = {}
    for a, b in PAIRS:
        for source_name, other_name in ((a, b), (b, a)):
            source = with_costs_and_names(read_run(ROOT / "tests/data/runs" / source_name))
            other = json.loads((ROOT / "tests/data/runs" / other_name / "summary.json").read_text())
            src_target = target_from_ceilings(run_ceilings(source.info), model)
            spec = find_spec(read_run_info(ROOT / "tests/data/runs" / other_name).hardware.name)
            calibration = find_calibration_matching(spec.match)
            dst_target = target_from_ceilings(ceilings_for(calibration.device, calibration), model)
            inputs = projection_inputs(source.kernels, source.ncu, model)
            on_src = phase_projection(project(inputs, src_target, model, Options(), src_target.l2_bytes))
            on_dst = phase_projection(project(inputs, dst_target, model, Options(), src_target.l2_bytes))
            ratios = {}
            for row in on_src.filter(pl.col("phase") != "unknown").iter_rows(named=True):
                phase = row["phase"]
                target_model = on_dst.filter(pl.col("phase") == phase)["projected_per_step_ns"][0]
                estimate = row["measured_per_step_ns"] * target_model / row["projected_per_step_ns"]
                ratios[phase] = round(estimate / (other["phases"][phase]["device_time_per_step_us"] * 1e3), 3)
            cross[f"{source_name} -> {other_name}"] = ratios
    result = {"left_out_model_over_measured": left_out, "cross_gpu_estimate_over_measured": cross,
              "fit_settings": kwargs}
    text = json.dumps(result, indent=2)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).parent.mkdir(parents=True, exist_ok=True)
        Path(sys.argv[1]).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
