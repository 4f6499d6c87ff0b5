"""`kernelscope hw list | show NAME | calibrate`: the hardware database and measured ceilings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernelscope.analyze.hardware import find_spec, load_specs
from kernelscope.errors import UserError
from kernelscope.load.calibration import calibration_dirs, device_slug, find_calibration


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
