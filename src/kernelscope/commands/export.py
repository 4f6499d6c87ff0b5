"""`kernelscope export RUN --format …`: a run's kernels in the shapes other tools read (docs/export.md).

- `kern-sum`: the table `nsys stats --report cuda_gpu_kern_sum --format csv` prints, with nsys's column names,
  plus kernelscope's catalog columns after `Name`; `kern-sum-nvtx` adds a leading `NVTX Range` column
  (`ks.phase:prefill`, `ks.phase:decode`), one group per phase, like nsys's per-range kernel summaries.
- `perfetto`: a Chrome trace (gzipped JSON, the shape Kineto writes) for the Perfetto UI or chrome://tracing:
  kernels, memory copies and sets on (device, stream) lanes, the runtime calls that launched them, CPU ops and
  annotation ranges, and flow arrows from launch to kernel. Every kernel's args carry kernelscope's attribution
  (`ks.phase`, `ks.module`, …). `kernelscope import` reads the file back into a run with the same kernels.

The tables and the trace are built in export/kern_sum.py and export/perfetto.py; this module picks the file and
writes it atomically.
"""

from __future__ import annotations

import argparse
import gzip
import io
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from kernelscope.errors import UserError
from kernelscope.filenames import safe_component

KERN_SUM = "kern-sum"
KERN_SUM_NVTX = "kern-sum-nvtx"
PERFETTO = "perfetto"
FORMATS = (KERN_SUM, KERN_SUM_NVTX, PERFETTO)

EXPORT_DIR = "export"
_DEFAULT_NAMES = {KERN_SUM: "kern_sum.csv", KERN_SUM_NVTX: "kern_sum_nvtx.csv", PERFETTO: "trace.perfetto.json.gz"}

HELP = "write a run's kernels as an nsys kernel summary (CSV) or a Perfetto trace"
DESCRIPTION = (
    "kern-sum: nsys stats cuda_gpu_kern_sum's columns (CSV) plus library, category and friendly name; "
    "kern-sum-nvtx: the same per phase range; perfetto: a Chrome / Perfetto trace (gzipped JSON) whose "
    "kernels carry kernelscope's attribution in their args, readable again by `kernelscope import`. "
    "Default file: RUN/export/. See docs/export.md."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, metavar="RUN", help="run directory")
    parser.add_argument("--format", required=True, choices=FORMATS, dest="fmt", help="what to write")
    parser.add_argument("--out", type=Path, help="file to write, or a directory for the default file name")
    parser.add_argument("--phase", help="kern-sum formats: this phase only (prefill, decode, or a model stage)")


def run(args: argparse.Namespace, steps) -> int:
    with steps.step(f"Exporting {args.fmt}"):
        path = export_run(args.run, args.fmt, args.out, phase=args.phase)
    print(path.resolve())
    return 0


def export_run(run_dir: Path, fmt: str, out: Path | None, phase: str | None = None) -> Path:
    """Write the run in format `fmt` to `out` (a file, or a directory to put the default file name in;
    default: RUN/export/<name>) and return the file written. Nothing half-written is left on failure."""
    from kernelscope.export.kern_sum import kern_sum_table, write_kern_sum_csv
    from kernelscope.export.perfetto import write_trace
    from kernelscope.load import rundir

    if fmt not in FORMATS:
        raise UserError(f"unknown export format {fmt!r} (choose one of: {', '.join(FORMATS)})")
    if fmt == PERFETTO and phase is not None:
        raise UserError(f"--phase applies to the {KERN_SUM} formats only, not to {PERFETTO}")
    run = rundir.read_run(run_dir)
    target = _target(run_dir, fmt, out, phase)
    if fmt == PERFETTO:
        if run.kernels.height and run.kernels["start_ns"].is_null().all():
            raise UserError(f"{run_dir}: its kernels have no start times (kernel summaries, or Nsight Compute results, "
                            "which measure kernels one at a time): there is no timeline to export as a trace")
        _write_atomically(target, lambda f: write_trace(run, f, trace_name=run_dir.resolve().name), compress=True,
                          run_dir=run_dir if out is None else None)
    else:
        table = kern_sum_table(run.kernels, phase, nvtx=fmt == KERN_SUM_NVTX, source=str(run_dir))
        _write_atomically(target, lambda f: f.write(write_kern_sum_csv(table)),
                          run_dir=run_dir if out is None else None)
    return target


def _target(run_dir: Path, fmt: str, out: Path | None, phase: str | None) -> Path:
    from kernelscope.load import staging

    name = _DEFAULT_NAMES[fmt]
    if phase is not None:
        stem, suffix = name.rsplit(".", 1)
        name = f"{stem}_{safe_component(phase)}.{suffix}"
    if out is None:  # inside the run: no link on the way (created when the file is written)
        return staging.inside_run(run_dir, EXPORT_DIR, name)
    return out / name if out.is_dir() else out


def _write_atomically(target: Path, write: Callable[[IO[str]], Any], compress: bool = False,
                      run_dir: Path | None = None) -> None:
    """Write (UTF-8 text, gzip-compressed if asked) into a temporary file next to `target`, then give it the
    name: an existing file is replaced only at the default place inside the run (`run_dir` given)."""
    from kernelscope.load import staging

    if run_dir is not None:  # its folder made now, never through a link
        staging.inside_run(run_dir, EXPORT_DIR, target.name, create=True)
    with staging.new_file(target, replace=run_dir is not None) as tmp, tmp.open("wb") as raw:
        stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) if compress else raw
        with io.TextIOWrapper(stream, encoding="utf-8", newline="") as text:
            write(text)
