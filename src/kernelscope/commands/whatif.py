"""`kernelscope whatif RUN [--hw NAME|SPEC.toml] [--set …] [--sweep …]`: project a measured run onto a target and
write the study; `kernelscope whatif RUN --speedup TARGET=FACTOR …`: re-time the run's dependency graph with some
work faster or slower (docs/whatif.md)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelscope.commands.arguments import add_lang_arg
from kernelscope.errors import UserError
from kernelscope.filenames import safe_component

if TYPE_CHECKING:
    from kernelscope.analyze.projection.energy_projection import EnergyTerms
    from kernelscope.analyze.projection.projection import ProjectionModel, Target
    from kernelscope.analyze.projection.whatif import WhatIf

HELP = "project a measured run onto other hardware, real or hypothetical"
DESCRIPTION = (
    "Project every kernel of a measured GPU run onto a target (a known device, a SPEC.toml, and/or --set "
    "values) with the fitted projection model; shows the calibration on the measuring device, the "
    "projection per phase and kind of work, what each design option buys, the bandwidth and compute that "
    "latency goals need, and sweeps. Writes whatif.md / whatif.zh.md, HTML, figures, tables/*.csv and "
    "whatif.json into RUN/whatif/<target>/ (or --out). With --speedup instead: every step of the run re-timed "
    "through its dependency graph with a kernel, a module or a class of work made faster (or slower), how much "
    "each step would shorten and the new critical path, into RUN/whatif/speedup-<targets>/ (speedup.json, "
    "tables/*.csv). See docs/whatif.md."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, metavar="RUN", help="run directory of a GPU run")
    parser.add_argument("--hw", metavar="NAME|SPEC.toml",
                        help="target: a key or name from `kernelscope hw list`, or a TOML spec "
                             "(default: the run's device)")
    parser.add_argument("--set", dest="settings", action="append", metavar="K=V,…",
                        help="change the target: bw=2TB/s, bf16=400TFLOPS (any precision), sram=256MB, "
                             "sram_bw=20TB/s, l2=128MB, latency=0.5 (per-kernel latency scale), fuse=yes, "
                             "weights=fp8|int8|fp4; runs of several ranks: ranks=8, link=450GB/s (one direction "
                             "per GPU), link_latency=1us (per extra ring step); repeatable")
    parser.add_argument("--sweep", action="append", metavar="K=START:STOP:N",
                        help="vary one quantity (bw in TB/s, precisions in TFLOP/s, sram/l2 in MB); repeatable "
                             "(default: bandwidth and BF16 compute from 0.25× to 4× the target's)")
    parser.add_argument("--model", type=Path, dest="model_file", metavar="FILE",
                        help="projection model from `kernelscope hw fit` (default: the shipped one)")
    parser.add_argument("--speedup", action="append", metavar="KERNEL_OR_MODULE_OR_CLASS=FACTOR",
                        help="re-time the run's dependency graph with this work divided by FACTOR (2: twice as "
                             "fast, 0.5: twice as slow): a kernel (its name or catalog label), a module (its "
                             "qualified name, submodules included), or a class (compute, communication, wait, "
                             "launch, host); `*` matches any text; repeatable. Not with --hw, --set, --sweep or "
                             "--model")
    parser.add_argument("--pj-per-flop", metavar="PJ|PRECISION=PJ,…",
                        help="the target's energy per FLOP in picojoules: one value for every precision, or per "
                             "precision (bf16=0.5,fp32=2); with --pj-per-byte and --static-watts: joules per prefill "
                             "and decode token on the target (estimated; docs/whatif.md)")
    parser.add_argument("--pj-per-byte", metavar="PJ", help="the target's energy per byte of DRAM traffic (pJ)")
    parser.add_argument("--static-watts", metavar="W", help="the target's board power with nothing running (W)")
    parser.add_argument("--out", type=Path, help="directory to create (default: RUN/whatif/<target>, replaced)")
    add_lang_arg(parser)


def run(args: argparse.Namespace, steps) -> int:
    if args.speedup:
        from kernelscope.commands.speedup import run_speedup

        if args.hw or args.settings or args.sweep or args.model_file or _energy_given(args):
            raise UserError("--speedup re-times the run's own dependency graph: it does not combine with --hw, "
                            "--set, --sweep, --model or the energy terms")
        return run_speedup(args.run, args.speedup, args.out, steps)
    with steps.step("Projecting"):
        settings = ",".join(args.settings) if args.settings else None  # --set a=1 --set b=2 is --set a=1,b=2
        from kernelscope.commands.whatif_terms import terms_from_arguments

        terms = terms_from_arguments(args.pj_per_flop, args.pj_per_byte, args.static_watts)
        path, study = run_whatif(args.run, args.hw, settings, args.sweep, args.model_file, args.out, args.lang,
                                 energy_terms=terms)
    if not getattr(args, "quiet", False):
        from kernelscope.report.whatif import MAX_CARRIED_PCT
        from kernelscope.report.whatif_headline import headline_lines

        print("\n".join(headline_lines(study, Path(path), args.lang, MAX_CARRIED_PCT)))
    print(Path(path).resolve())
    return 0


WHATIF_DIR = "whatif"
STUDY_FILE = "whatif.json"  # in every study folder: what marks a folder as one kernelscope may replace


def _energy_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, k, None) is not None for k in ("pj_per_flop", "pj_per_byte", "static_watts"))


def run_whatif(run_dir: Path, hw: str | None, settings: str | None, sweeps: list[str] | None,
               model_file: Path | None, out: Path | None, languages: tuple[str, ...] = ("en", "zh"),
               energy_terms: EnergyTerms | None = None) -> tuple[Path, WhatIf]:
    from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
    from kernelscope.analyze.projection.projection import (
        Options,
        default_model,
        parse_model,
        projection_inputs,
        target_from_ceilings,
        vary,
    )
    from kernelscope.analyze.projection.whatif import what_if
    from kernelscope.commands.whatif_energy import EnergyRequest, study_energy
    from kernelscope.load import rundir, staging
    from kernelscope.load.whatif_inputs import parse_parallel, parse_settings, parse_sweep, read_model_file
    from kernelscope.pipeline import run_ceilings
    from kernelscope.report.whatif import render_whatif

    run = rundir.read_run(run_dir, ops=False)
    kernels = run.kernels
    if run.info.is_cpu or (kernels.height and kernels["kind"][0] == "cpu_op"):
        raise UserError(f"{run_dir}: a CPU run: whatif projects GPU kernels (profile or import a GPU run)")
    model = parse_model(read_model_file(model_file)) if model_file else default_model()
    ceilings = run_ceilings(run.info)
    if ceilings is None or not ceilings.bandwidth:
        hint = ("; an imported trace: name its GPU with `kernelscope import --device NAME` (see `kernelscope hw list`)"
                if run.info.source == "import" else "")
        raise UserError(f"{run_dir}: its device ({run.info.hardware.name or 'unknown'}) is neither in the hardware "
                        f"database nor calibrated: whatif needs the measuring device's ceilings{hint}")
    source = target_from_ceilings(ceilings, model)
    target = _target(hw, source, model)
    if out is None:  # a link or a foreign folder where the study goes is refused before any work
        staging.inside_run(run_dir, WHATIF_DIR, _slug(target.name, settings))
    quantities, choices = parse_settings(settings)
    for field, value in quantities.items():
        target = vary(target, field, value)
        target = target.changed(source={**target.source, field: "--set"})
    options = Options(**choices)
    chosen_sweeps = [parse_sweep(s) for s in sweeps] if sweeps else None
    run = with_costs_and_names(run)
    if not run.kernels.filter(run.kernels["kind"] != "cpu_op").height:
        raise UserError(f"{run_dir}: no GPU kernels to project")
    inputs = projection_inputs(run.kernels, run.ncu, model)
    parallel = _parallel_request(parse_parallel(settings), run_dir, run.kernels, ceilings, hw)
    study = what_if(inputs, source, target, model, options, source.l2_bytes, run.info, chosen_sweeps, parallel)
    if parallel is not None and study.parallel is None:
        raise UserError(f"{run_dir}: no collective kernels matched across its ranks: nothing to project onto "
                        f"{parallel.target_ranks} ranks")
    study.energy = study_energy(run, study, ceilings.spec,
                                EnergyRequest(*_target_energy(hw), arguments=energy_terms or EnergyTerms()))
    slug = _slug(target.name, settings)
    if out is None:  # inside the run: no link on the way, created only now that there is something to write
        staging.inside_run(run_dir, WHATIF_DIR, slug, create=True)
    destination = out or run_dir / WHATIF_DIR / slug
    with staging.staged_directory(destination, replace=out is None, signature=STUDY_FILE) as tmp:
        render_whatif(study, model, run.info.workload, run_dir, tmp, languages=languages)
    return destination.resolve(), study


def _parallel_request(values: dict[str, float], run_dir: Path, kernels, ceilings, hw: str | None):
    """--set ranks=/link=/link_latency= as a ParallelRequest; None when none is given. The links: the measuring
    device's from the hardware database (one direction: half the datasheet's both-ways figure), the target's
    from --set link, else the --hw device's, else the measuring device's."""
    from kernelscope.analyze.hardware import find_spec
    from kernelscope.analyze.projection.parallel_projection import ParallelRequest

    if not values:
        return None
    ranks = kernels["rank"].n_unique() if "rank" in kernels.columns else 1
    if ranks < 2:
        raise UserError(f"--set ranks/link: {run_dir} holds one rank; the parallel what-if starts from a run of "
                        "several (profile --gpus N, or import the ranks' traces)")

    def one_way(spec) -> float | None:
        link = spec.interconnect.link_bandwidth if spec is not None and spec.interconnect is not None else None
        return link / 2 if link else None

    source_link = one_way(ceilings.spec)
    target_spec = find_spec(hw) if hw is not None and not hw.lower().endswith(".toml") else None
    target_link = values.get("link") or one_way(target_spec) or source_link
    if not target_link:
        raise UserError("--set link: the links between the GPUs are not in the hardware database for this "
                        "device; give link=<bandwidth one way>, e.g. link=450GB/s")
    return ParallelRequest(target_ranks=int(values.get("ranks", ranks)), target_link=target_link,
                           source_link=source_link, hop_latency_ns=values.get("link_latency"))


def _target_energy(hw: str | None) -> tuple[Any, str]:
    """The target's `energy` table as written and where it was read: a SPEC.toml's or the --hw device's in the
    hardware data (None: it names none, or the target is the run's own device)."""
    from kernelscope.analyze.hardware import find_spec
    from kernelscope.load.whatif_inputs import read_spec_file

    if hw is None:
        return None, ""
    path = Path(hw)
    if path.suffix.lower() == ".toml" or path.is_file():
        return read_spec_file(path).get("energy"), f"spec file {path.name}"
    spec = find_spec(hw)
    return (spec.energy, f"hardware data ({spec.key})") if spec is not None else (None, "")


def _target(hw: str | None, source: Target, model: ProjectionModel) -> Target:
    from kernelscope.analyze.hardware import ceilings_for, find_spec
    from kernelscope.analyze.projection.projection import Target, target_from_ceilings
    from kernelscope.load.calibration import find_calibration_matching
    from kernelscope.load.whatif_inputs import read_spec_file

    if hw is None:
        return source
    path = Path(hw)
    if path.suffix.lower() == ".toml" or path.is_file():
        spec = read_spec_file(path)
        fields = {k: v for k, v in spec.items() if k not in ("name", "energy")}
        return Target(name=spec["name"], source=dict.fromkeys([*fields, *spec["flops"]], f"spec file {path.name}"),
                      **fields)
    spec = find_spec(hw)
    if spec is None:
        raise UserError(f"--hw: no device matches '{hw}' (see `kernelscope hw list`, or give a SPEC.toml)")
    calibration = find_calibration_matching(spec.match)
    ceilings = ceilings_for(calibration.device if calibration else spec.name, calibration)
    if ceilings is None:
        raise UserError(f"--hw: no ceilings for '{hw}'")
    return target_from_ceilings(ceilings, model)


def _slug(name: str, settings: str | None) -> str:
    """The default folder of a study: the target's name and the --set values, one safe path component."""
    base = re.sub(r"[^a-z0-9.]+", "-", re.sub(r"^nvidia\s+", "", name, flags=re.IGNORECASE).lower()).strip("-.")
    extra = re.sub(r"[^a-z0-9.]+", "-", (settings or "").lower()).strip("-.")
    return safe_component(f"{base}-{extra}" if extra else base, fallback="target")
