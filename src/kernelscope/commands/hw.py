"""`kernelscope hw list | show NAME | calibrate`: the hardware database and measured ceilings."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from kernelscope.analyze.hardware import find_spec, load_specs
from kernelscope.analyze.projection import default_model, projection_inputs, target_from_ceilings
from kernelscope.analyze.projection_fit import FitRun, calibration_table, fit_factors, with_fit
from kernelscope.analyze.tables import with_costs
from kernelscope.commands.finish import run_ceilings
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.calibration import calibration_dirs, device_slug, find_calibration
from kernelscope.load.targets import model_toml


def _tera(value: float | None) -> str:
    return "–" if not value else f"{value / 1e12:,.1f}"


def list_specs() -> str:
    header = f"{'key':16s} {'name':34s} {'TB/s':>6s} {'BF16 TF':>8s} {'FP8 TF':>8s} {'FP32 TF':>8s} {'ridge':>6s} {'L2 MB':>6s}"
    lines = [header, "-" * len(header)]
    for spec in load_specs().values():
        ridge = spec.ridge("bf16")
        lines.append(
            f"{spec.key:16s} {spec.name:34s} {spec.memory_bandwidth / 1e12:6.2f} {_tera(spec.peak.get('bf16')):>8s} "
            f"{_tera(spec.peak.get('fp8')):>8s} {_tera(spec.peak.get('fp32')):>8s} "
            f"{(f'{ridge:.0f}' if ridge else '–'):>6s} {(f'{spec.l2_bytes / 2**20:.0f}' if spec.l2_bytes else '–'):>6s}"
        )
    lines.append("TF: dense TFLOP/s; ridge: BF16 FLOP per byte; datasheet values (see `kernelscope hw show KEY`).")
    return "\n".join(lines)


def show_spec(name: str) -> str:
    spec = find_spec(name)
    if spec is None:
        raise UserError(f"hw show: no device matches '{name}' (see `kernelscope hw list`)")
    lines = [f"{spec.name}  [{spec.key}]  {spec.vendor} {spec.architecture}",
             f"  multiprocessors   {spec.sm_count}", f"  boost clock       {spec.boost_clock_mhz:.0f} MHz",
             f"  memory            {spec.memory_bytes / 1e9:.0f} GB at {spec.memory_bandwidth / 1e12:.2f} TB/s",
             f"  L2                {spec.l2_bytes / 2**20:.0f} MiB" if spec.l2_bytes else "  L2                –",
             "  peak (dense)"]
    for key, value in spec.peak.items():
        ridge = spec.ridge(key)
        lines.append(f"    {key:12s} {value / 1e12:10.1f} TFLOP/s   ridge {ridge:7.1f} FLOP/B")
    lines.append("  sources")
    lines += [f"    - {s}" for s in spec.sources]
    calibration = find_calibration(spec.name)
    if calibration:
        lines.append(f"  measured ({calibration.get('date')}, {calibration['path']})")
        lines.append(f"    copy bandwidth {calibration['copy_bandwidth'] / 1e12:.2f} TB/s")
        for key, value in (calibration.get("gemm_flops") or {}).items():
            if value:
                lines.append(f"    {key:12s} {value / 1e12:10.1f} TFLOP/s")
    return "\n".join(lines)


def run_calibration(device_name: str | None, out: Path | None, quick: bool) -> tuple[dict[str, Any], Path]:
    from kernelscope.capture.calibrate import calibrate
    from kernelscope.commands.profile import resolve_device

    device = resolve_device(device_name)
    result = calibrate(device, quick=quick)
    target = out or calibration_dirs()[0] / f"{device_slug(result['device'])}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result, target


def describe_calibration(result: dict[str, Any]) -> str:
    lines = [f"{result['device']}: copy {result['copy_bandwidth'] / 1e12:.3f} TB/s (read + write)"]
    for key, value in result["gemm_flops"].items():
        lines.append(f"  GEMM {key:5s} {'not supported' if value is None else f'{value / 1e12:.1f} TFLOP/s'}")
    return "\n".join(lines)


def fit_projection(runs: list[Path], out: Path | None) -> tuple[str, Path | None]:
    """Fit the what-if projection model on GPU runs; the calibration table as text, and the model file written."""
    model = default_model()
    settings = model.fit
    fit_runs = []
    for path in runs:
        profile = rundir.read_run(path)
        ceilings = run_ceilings(profile)
        if ceilings is None or not ceilings.bandwidth or (profile.run.get("hardware") or {}).get("device_type") == "cpu":
            raise UserError(f"{path}: not a GPU run with known ceilings; cannot fit on it")
        target = target_from_ceilings(ceilings)
        fit_runs.append(FitRun(str(path), projection_inputs(with_costs(profile), profile.ncu, model), target,
                               target.l2_bytes))
    fit = fit_factors(fit_runs, grid_points=int(settings.get("grid_points", 40)),
                      efficiency_min=float(settings.get("efficiency_min", 0.05)),
                      efficiency_max=float(settings.get("efficiency_max", 1.5)))
    fitted = with_fit(model, fit)
    scaled = [FitRun(r.label, r.inputs, r.target.changed(latency_scale=fit.device_latency.get(r.target.name, 1.0)),
                     r.l2_bytes) for r in fit_runs]
    table = calibration_table(scaled, fitted)
    lines = [f"{'run':60s} {'phase':8s} {'measured/step':>14s} {'model/step':>12s} {'ratio':>6s}"]
    for row in table.filter(pl.col("phase") != "unknown").iter_rows(named=True):
        lines.append(f"{row['run'][-60:]:60s} {row['phase']:8s} {row['measured_per_step_ns'] / 1e3:11.1f} µs "
                     f"{row['projected_per_step_ns'] / 1e3:9.1f} µs {row['ratio']:6.3f}")
    for group, f in sorted(fit.factors.items()):
        lines.append(f"{group:12s} latency {f.latency_ns:8.1f} ns  memory efficiency {f.memory_efficiency:.3f}  "
                     f"compute efficiency {f.compute_efficiency:.3f}")
    if out is None:
        return "\n".join(lines), None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    data = {
        "groups": fitted.groups,
        "what_if": {"fusable": list(fitted.fusable), "weight_bound": list(fitted.weight_bound),
                    "onchip_bandwidth_ratio": fitted.onchip_bandwidth_ratio},
        "fit": {**settings, "runs": [p.resolve().name for p in runs], "date": datetime.now(UTC).date().isoformat(),
                "commit": commit},
        "device_latency": fit.device_latency,
        "factors": {g: {"latency_ns": f.latency_ns, "memory_efficiency": f.memory_efficiency,
                        "compute_efficiency": f.compute_efficiency} for g, f in fitted.factors.items()},
    }
    header = ("The projection model of `kernelscope whatif` (docs/whatif.md), written by `kernelscope hw fit`.\n"
              "projected = latency_ns · latency_scale + max(bytes / (bandwidth · memory_efficiency),\n"
              "                                             flops / (peak[precision] · compute_efficiency))\n"
              "[groups]: catalog category → kind of work (others: \"other\"). [what_if]: kinds folded away by fusion,\n"
              "kinds whose bytes a decode step re-reads (weights, KV cache), on-chip bandwidth ÷ DRAM bandwidth.\n"
              "[fit]: the search bounds and the runs fitted. [device_latency]: per fitted device, its per-kernel\n"
              "latency relative to the factors' (geometric mean 1). [factors.*]: per kind of work.")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(model_toml(data, header), encoding="utf-8")
    return "\n".join(lines), out


