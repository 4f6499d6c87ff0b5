"""`kernelscope hw list | show NAME | calibrate | fit`: the hardware database and measured ceilings."""

from __future__ import annotations

import argparse
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kernelscope.errors import UserError

if TYPE_CHECKING:
    from kernelscope.contracts.calibration import Calibration

HELP = "hardware database and measured ceilings"
DESCRIPTION = "Datasheet peaks of known devices, and ceilings measured on this machine."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="hw_command", required=True, metavar="ACTION")
    actions.add_parser("list", help="list known devices", description="List the devices of the hardware database.")
    show = actions.add_parser("show", help="one device's specs and measurements",
                              description="Show a device's datasheet values, sources and any measured ceilings.")
    show.add_argument("name", help="a key from `hw list` (e.g. h100-sxm) or a device name (e.g. 'NVIDIA H200')")
    cal = actions.add_parser(
        "calibrate", help="measure copy bandwidth and GEMM throughput here",
        description=(
            "Measure achievable copy bandwidth (bytes read + written) and large-GEMM throughput per dtype on the "
            "present device (a GPU, or the CPU), and store them; reports then use them instead of datasheet peaks."
        ),
    )
    cal.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    cal.add_argument("--out", type=Path, help="where to write the JSON (default: $KERNELSCOPE_CALIBRATION_DIR or "
                                              "~/.cache/kernelscope/calibration)")
    cal.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    fit = actions.add_parser(
        "fit", help="fit the what-if projection model on measured runs",
        description=(
            "Fit the projection model's per-kernel latency and efficiencies per kind of work (and each device's "
            "latency scale) on GPU run directories, print each run projected onto its own device, and write the "
            "model (TOML) for `kernelscope whatif --model`."
        ),
    )
    fit.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="GPU run directories")
    fit.add_argument("--out", type=Path, help="where to write the model (default: print the calibration only)")
    fit.add_argument("--pair", nargs=2, action="append", type=Path, metavar=("RUN_A", "RUN_B"), default=[],
                     help="two runs of one workload on two devices (repeatable): with [fit] scale_by = \"run\", each "
                          "device's latency scale comes from these pairs; a run not among RUN gives its scale only "
                          "(it fits no factor)")


def run(args: argparse.Namespace, steps) -> int:
    if args.hw_command == "list":
        print(list_specs())
    elif args.hw_command == "show":
        print(show_spec(args.name))
    elif args.hw_command == "fit":
        with steps.step(f"Fitting the projection model on {len(args.runs)} runs"):
            text, written = fit_projection(args.runs, args.out, args.pair)
        print(text)
        if written:
            print(written)
    else:
        with steps.step("Measuring copy bandwidth and GEMM throughput"):
            result, path = run_calibration(args.device, args.out, args.quick)
        print(describe_calibration(result))
        print(path)
    return 0


def _tera(value: float | None) -> str:
    return "–" if not value else f"{value / 1e12:,.1f}"


def list_specs() -> str:
    from kernelscope.analyze.hardware import load_specs

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
    from kernelscope.analyze.hardware import find_spec
    from kernelscope.load.calibration import find_calibration

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
    if spec.interconnect:
        link = spec.interconnect
        if link.link:
            lines.append(f"  GPU link          {link.link}, {link.link_bandwidth / 1e9:.0f} GB/s (both directions)")
        lines.append(f"  host link         {link.host_link}, {link.host_bandwidth / 1e9:.0f} GB/s (both directions)")
    lines.append("  sources")
    lines += [f"    - {s}" for s in spec.sources]
    calibration = find_calibration(spec.name)
    if calibration:
        lines.append(f"  measured ({calibration.date}, {calibration.path})")
        lines.append(f"    copy bandwidth {calibration.copy_bandwidth / 1e12:.2f} TB/s")
        for key, value in calibration.gemm_flops.items():
            if value:
                lines.append(f"    {key:12s} {value / 1e12:10.1f} TFLOP/s")
    return "\n".join(lines)


def run_calibration(device_name: str | None, out: Path | None, quick: bool) -> tuple[Calibration, Path]:
    from kernelscope.capture.calibrate import calibrate
    from kernelscope.load.calibration import write_calibration
    from kernelscope.workload.devices import resolve_device

    result = calibrate(resolve_device(device_name), quick=quick)
    return result, write_calibration(result, out)


def describe_calibration(result: Calibration) -> str:
    lines = [f"{result.device}: copy {result.copy_bandwidth / 1e12:.3f} TB/s (read + write)"]
    for key, value in result.gemm_flops.items():
        lines.append(f"  GEMM {key:5s} {'not supported' if value is None else f'{value / 1e12:.1f} TFLOP/s'}")
    return "\n".join(lines)


def fit_projection(runs: list[Path], out: Path | None, pairs: list[list[Path]] | None = None
                   ) -> tuple[str, Path | None]:
    """Fit the what-if projection model on GPU runs; the calibration table as text, and the model file written."""
    from kernelscope.analyze.projection.projection import default_model
    from kernelscope.analyze.projection.projection_fit import FitRun, fit_model, fitted_target

    model = default_model()
    settings = model.fit
    labels = {path.resolve(): str(path) for path in runs}
    # A run named only in --pair gives its latency scale (for its pair's ratio) without fitting the factors.
    scale_only = {x.resolve(): str(x) for pair in pairs or [] for x in pair if x.resolve() not in labels}
    labels.update(scale_only)
    if len({labels[x.resolve()] for pair in pairs or [] for x in pair}) < 2 * len(pairs or []):
        raise UserError("--pair: a run appears in more than one pair, or twice in one")
    pair_labels = [(labels[a.resolve()], labels[b.resolve()]) for a, b in pairs or []]
    fit_runs = [_fit_run(path, model) for path in [*runs, *(Path(p) for p in scale_only.values())]]
    fitted = fit_model(fit_runs, model, settings, families=bool(settings.get("families", False)), pairs=pair_labels,
                       scale_only=set(scale_only.values()))
    scaled = [FitRun(r.label, r.inputs, fitted_target(r, fitted), r.l2_bytes, r.family, r.device) for r in fit_runs
              if r.label not in scale_only.values()]
    text = _calibration_text(scaled, fitted)
    if out is None:
        return text, None
    return text, _write_model(out, fitted, settings, runs, pair_labels)


def _fit_run(path: Path, model):
    from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
    from kernelscope.analyze.projection.projection import projection_inputs, target_from_ceilings
    from kernelscope.analyze.projection.projection_fit import FitRun
    from kernelscope.load import rundir
    from kernelscope.pipeline import run_ceilings

    run = rundir.read_run(path, ops=False)
    ceilings = run_ceilings(run.info)
    if ceilings is None or not ceilings.bandwidth or run.info.is_cpu:
        raise UserError(f"{path}: not a GPU run with known ceilings; cannot fit on it")
    target = target_from_ceilings(ceilings)
    run = with_costs_and_names(run)
    return FitRun(str(path), projection_inputs(run.kernels, run.ncu, model), target, target.l2_bytes, target.family,
                  ceilings.spec.name if ceilings.spec else None)


def _calibration_text(scaled, fitted) -> str:
    import polars as pl

    from kernelscope.analyze.projection.projection_fit import calibration_table

    table = calibration_table(scaled, fitted)
    lines = [f"{'run':60s} {'phase':8s} {'measured/step':>14s} {'model/step':>12s} {'ratio':>6s}"]
    for row in table.filter(pl.col("phase") != "unknown").iter_rows(named=True):
        lines.append(f"{row['run'][-60:]:60s} {row['phase']:8s} {row['measured_per_step_ns'] / 1e3:11.1f} µs "
                     f"{row['projected_per_step_ns'] / 1e3:9.1f} µs {row['ratio']:6.3f}")
    for group, f in sorted(fitted.factors.items()):
        lines.append(f"{group:12s} latency {f.latency_ns:8.1f} ns  memory efficiency {f.memory_efficiency:.3f}  "
                     f"compute efficiency {f.compute_efficiency:.3f}")
    return "\n".join(lines)


MODEL_HEADER = (
    "The projection model of `kernelscope whatif` (docs/whatif.md), written by `kernelscope hw fit`.\n"
    "projected = latency_ns · latency_scale + max(bytes / (bandwidth · memory_efficiency),\n"
    "                                             flops / (peak[precision] · compute_efficiency))\n"
    "[groups]: catalog category → kind of work (others: \"other\"). [what_if]: kinds folded away by fusion,\n"
    "kinds whose bytes a decode step re-reads (weights, KV cache), on-chip bandwidth ÷ DRAM bandwidth.\n"
    "[fit]: the search bounds and the runs fitted. [device_latency]: per fitted device, its per-kernel\n"
    "latency relative to the factors' (geometric mean 1). [factors.*]: per kind of work. [families.*.*]: factors\n"
    "fitted per device family (with [fit] families = true). [device_roofs.*]: shares of a datasheet device's\n"
    "bandwidth and compute peaks, [device_kind_latency.*]: its per-kernel latency per kind of work, both from pairs of\n"
    "runs (with [fit] roofs, kind_latency). [uncertainty.same|other]: per kind of work and per\n"
    "phase (\"*\"), RMS of ln(estimate / measured) over held-out projections (benchmarks/whatif/held_out.py)."
)


def _factor_table(f) -> dict[str, float]:
    return {"latency_ns": f.latency_ns, "memory_efficiency": f.memory_efficiency,
            "compute_efficiency": f.compute_efficiency}


def _write_model(out: Path, fitted, settings: dict, runs: list[Path], pair_labels: list[tuple[str, str]]) -> Path:
    from kernelscope.load.whatif_inputs import model_toml

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    data = {
        "groups": fitted.groups,
        "what_if": {"fusable": list(fitted.fusable), "weight_bound": list(fitted.weight_bound),
                    "onchip_bandwidth_ratio": fitted.onchip_bandwidth_ratio},
        "fit": {**settings, "runs": [p.resolve().name for p in runs],
                "pairs": [f"{Path(a).resolve().name} {Path(b).resolve().name}" for a, b in pair_labels],
                "date": datetime.now(UTC).date().isoformat(),
                "commit": commit},
        "device_latency": fitted.device_latency,
        "factors": {g: _factor_table(f) for g, f in fitted.factors.items()},
        "families": {name: {g: _factor_table(f) for g, f in table.items()} for name, table in fitted.families.items()},
        "uncertainty": fitted.uncertainty,
        "device_roofs": {name: {"memory": m, "compute": c} for name, (m, c) in fitted.device_roofs.items()},
        "device_kind_latency": fitted.device_kind_latency,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(model_toml(data, MODEL_HEADER), encoding="utf-8")
    return out
