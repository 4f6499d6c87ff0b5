"""`kernelscope whatif RUN --speedup TARGET=FACTOR …`: the work of the whatif verb when it re-times a run's
dependency graph (docs/whatif.md, "What shortening buys"). Not a verb of its own: commands/whatif.py calls it."""

from __future__ import annotations

import re
from pathlib import Path

from kernelscope.errors import UserError
from kernelscope.filenames import safe_component

WHATIF_DIR = "whatif"


def run_speedup(run_dir: Path, texts: list[str], out: Path | None, steps) -> int:
    from kernelscope.load.speedup_inputs import parse_speedup

    parsed = [parse_speedup(text) for text in texts]  # every value checked before any work
    with steps.step("Re-timing the dependency graph"):
        destination, lines = speedup_study_files(run_dir, parsed, out)
    for line in lines:
        print(line)
    print(destination)
    return 0


def speedup_study_files(run_dir: Path, parsed: list[tuple[str, float]], out: Path | None) -> tuple[Path, list[str]]:
    """The study written into RUN/whatif/speedup-<targets>/ (replaced) or `out` (must not exist); its folder and
    the lines to print."""
    from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
    from kernelscope.analyze.paths.path_tables import run_critical_paths
    from kernelscope.analyze.paths.retime import Speedup
    from kernelscope.analyze.paths.speedup import speedup_study
    from kernelscope.load import rundir, staging
    from kernelscope.report.speedup import STUDY_FILE, study_lines, write_study

    slug = _slug(parsed)
    if out is None:  # a link or a foreign folder where the study goes is refused before any work
        staging.inside_run(run_dir, WHATIF_DIR, slug)
    run = rundir.read_run(run_dir, ops=False)
    if run.info.is_cpu or (run.kernels.height and (run.kernels["kind"] == "cpu_op").all()):
        raise UserError(f"{run_dir}: a CPU run: --speedup re-times device work and its launches (profile or import "
                        "a GPU run)")
    critical = run_critical_paths(with_costs_and_names(run), rundir.read_host_ops(run_dir))
    if critical is None or critical.graph.n_device == 0:
        raise UserError(f"{run_dir}: its kernels have no timeline (kernel summaries, or Nsight Compute exports "
                        "alone): there is no dependency graph to re-time")
    try:
        study = speedup_study(critical, [Speedup(target, factor) for target, factor in parsed])
    except ValueError as exc:
        raise UserError(f"--speedup: {exc}") from None
    if out is None:
        staging.inside_run(run_dir, WHATIF_DIR, slug, create=True)
    destination = out or run_dir / WHATIF_DIR / slug
    with staging.staged_directory(destination, replace=out is None, signature=STUDY_FILE) as tmp:
        write_study(study, run_dir, tmp)
    return destination.resolve(), study_lines(study)


def _slug(parsed: list[tuple[str, float]]) -> str:
    """The default folder: speedup- and the targets with their factors, one safe path component."""
    text = "-".join(f"{target}-{factor:g}" for target, factor in parsed)
    return safe_component("speedup-" + re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")[:80],
                          fallback="speedup")
