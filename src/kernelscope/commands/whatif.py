"""`kernelscope whatif RUN [--hw NAME|SPEC.toml] [--set …] [--sweep …]`: project a measured run onto a target and
write the study (docs/whatif.md)."""

from __future__ import annotations

import re
from pathlib import Path

from kernelscope.analyze.hardware import ceilings_for, find_spec
from kernelscope.analyze.projection import (
    Options,
    ProjectionModel,
    Target,
    default_model,
    parse_model,
    projection_inputs,
    target_from_ceilings,
    vary,
)
from kernelscope.analyze.tables import with_costs
from kernelscope.analyze.whatif import what_if
from kernelscope.commands.finish import run_ceilings
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.calibration import find_calibration_matching
from kernelscope.load.targets import parse_settings, parse_sweep, read_model_file, read_spec_file
from kernelscope.report.whatif import LANGUAGES, render_whatif

WHATIF_DIR = "whatif"


def run_whatif(run: Path, hw: str | None, settings: str | None, sweeps: list[str] | None, model_file: Path | None,
               out: Path | None, languages: tuple[str, ...] = LANGUAGES) -> Path:
    profile = rundir.read_run(run)
    hardware = profile.run.get("hardware") or {}
    if hardware.get("device_type") == "cpu" or (profile.kernels.height and profile.kernels["kind"][0] == "cpu_op"):
        raise UserError(f"{run}: a CPU run: whatif projects GPU kernels (profile or import a GPU run)")
    model = parse_model(read_model_file(model_file)) if model_file else default_model()
    ceilings = run_ceilings(profile)
    if ceilings is None or not ceilings.bandwidth:
        raise UserError(f"{run}: its device ({hardware.get('name') or 'unknown'}) is neither in the hardware "
                        f"database nor calibrated: whatif needs the measuring device's ceilings")
    source = target_from_ceilings(ceilings, model)
    target = _target(hw, source, model)
    quantities, choices = parse_settings(settings)
    for field, value in quantities.items():
        target = vary(target, field, value)
        target = target.changed(source={**target.source, field: "--set"})
    options = Options(**choices)
    chosen_sweeps = [parse_sweep(s) for s in sweeps] if sweeps else None
    kernels = with_costs(profile)
    if not kernels.filter(kernels["kind"] != "cpu_op").height:
        raise UserError(f"{run}: no GPU kernels to project")
    inputs = projection_inputs(kernels, profile.ncu, model)
    study = what_if(inputs, source, target, model, options, source.l2_bytes, profile.run, chosen_sweeps)
    destination = out or run / WHATIF_DIR / _slug(target.name, settings)
    with rundir.staged_directory(destination, replace=out is None) as tmp:
        render_whatif(study, model, profile.run, run, tmp, languages=languages)
    return destination.resolve()


def _target(hw: str | None, source: Target, model: ProjectionModel) -> Target:
    if hw is None:
        return source
    path = Path(hw)
    if path.suffix.lower() == ".toml" or path.is_file():
        spec = read_spec_file(path)
        fields = {k: v for k, v in spec.items() if k not in ("name",)}
        return Target(name=spec["name"], source=dict.fromkeys([*fields, *spec["flops"]], f"spec file {path.name}"),
                      **fields)
    spec = find_spec(hw)
    if spec is None:
        raise UserError(f"--hw: no device matches '{hw}' (see `kernelscope hw list`, or give a SPEC.toml)")
    calibration = find_calibration_matching(spec.match)
    ceilings = ceilings_for(calibration["device"] if calibration else spec.name, calibration)
    if ceilings is None:
        raise UserError(f"--hw: no ceilings for '{hw}'")
    return target_from_ceilings(ceilings, model)


def _slug(name: str, settings: str | None) -> str:
    base = re.sub(r"[^a-z0-9.]+", "-", re.sub(r"^nvidia\s+", "", name, flags=re.IGNORECASE).lower()).strip("-")
    extra = re.sub(r"[^a-z0-9.=]+", "-", (settings or "").lower()).strip("-")
    return f"{base}-{extra}"[:120].strip("-") if extra else base or "target"
