"""`kernelscope import FILE…`: make a run directory from recordings made elsewhere (Kineto / torch.profiler JSON of
any program, Nsight Systems SQLite exports or .nsys-rep reports, `nsys stats` kernel summaries, Nsight Compute
exports), or add Nsight Compute exports to an existing run (--into). The kind of each file is found by its content
(load/sources.py); the work for each kind is in commands/importers/."""

from __future__ import annotations

import argparse
from pathlib import Path

from kernelscope.commands.arguments import add_output_args, positive_int
from kernelscope.errors import UserError

HELP = "make a run directory from traces made elsewhere: Kineto, Nsight Systems, Nsight Compute"
DESCRIPTION = (
    "Read Kineto / torch.profiler traces (.json or .json.gz) written by any program (vLLM, SGLang, "
    "training jobs, kernelscope itself), Nsight Systems SQLite exports or .nsys-rep reports, `nsys stats` "
    "kernel summaries (CSV / TSV; one file per phase, named *prefill* / *decode*), or Nsight Compute "
    "exports into a run directory. Several trace files become ranks of one run. Phases, steps and modules "
    "come from kernelscope's ranges where the program pushed them, else from the trace's own markers: step "
    "annotations of serving engines, ProfilerStep#N ranges, forwards, nn.Module frames, record_function "
    "annotations (docs/importing.md)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE",
                        help="Kineto traces, nsys SQLite exports / .nsys-rep, nsys stats CSVs, or Nsight Compute "
                             "exports (CSV, .ncu-rep, or a directory of <kernel>/ncu.details.csv)")
    parser.add_argument("--into", type=Path, metavar="RUN",
                        help="add Nsight Compute exports to this existing run instead of making a new one")
    parser.add_argument("--phase", default="decode", choices=["prefill", "decode"],
                        help="with --into: the phase the exports measured (default decode)")
    parser.add_argument("--capture", action="append", type=Path, metavar="PATH",
                        help="a trace of the CUDA-graph capture that the imported traces replay (vLLM's and SGLang's "
                             "capture_traces/), or a directory of them; repeatable. Replayed kernels take the op, "
                             "module and source line recorded at capture")
    parser.add_argument("--model-config", type=Path, metavar="PATH",
                        help="the model's Hugging Face config.json (or its directory): costs the kernels of traces "
                             "that recorded no shapes (and fused ops that name no weights) from the model's sizes "
                             "and each step's tokens (docs/roofline.md)")
    parser.add_argument("--no-model-recognition", dest="model_recognition", action="store_false",
                        help="without --model-config, do not recognise a public model from the trace's own evidence "
                             "(code paths, module classes, shapes) to cost it from kernelscope's catalog of model "
                             "configs (docs/roofline.md)")
    parser.add_argument("--batch-size", type=_jobs, metavar="N",
                        help="with --model-config, for traces that say nothing of their batch: sequences per step")
    parser.add_argument("--prompt-len", type=_jobs, metavar="N",
                        help="with --model-config and --batch-size: prompt tokens per sequence (the prefill step's "
                             "tokens; decode step i attends to prompt + i + 1 tokens)")
    parser.add_argument("--device", metavar="DEVICE",
                        help="the GPU the recording ran on, for files that name it generically or not at all: a "
                             "key or device name of `kernelscope hw list` (picks the datasheet ceilings)")
    parser.add_argument("--jobs", type=_jobs, metavar="N",
                        help="processes that read several trace files at once (default: one per core and file, as "
                             "memory allows; 1: one after the other)")
    parser.add_argument("--cluster", metavar="ADDRESS",
                        help="read the trace files as tasks on a Ray cluster (ray://host:port, or local: a Ray "
                             "instance on this machine); needs the ray extra (pip install 'kernelscope[ray]') and "
                             "the files at the same paths on every node")
    add_output_args(parser)


def run(args: argparse.Namespace, steps) -> int:
    for path in args.files:
        if not path.exists():  # answered before any heavy library is imported
            raise UserError(f"{path}: no such file")
    captures = _capture_files(args.capture or [])
    model_config = _model_config(args)
    _warm_up_helpers(args)
    from kernelscope.load.sources import NCU, NSYS_STATS, source_kind

    kinds = {source_kind(path) for path in args.files}
    kind = NCU if kinds == {NCU} else NSYS_STATS if kinds == {NSYS_STATS} else None
    if kind is None and kinds & {NCU, NSYS_STATS}:
        raise UserError("import: give one kind of file at a time: traces (Kineto JSON, nsys SQLite or "
                        ".nsys-rep), nsys stats kernel summaries, or Nsight Compute exports")
    if args.into is not None and kind != NCU:
        raise UserError("import --into: only Nsight Compute exports can be added to an existing run")
    if captures and kind is not None:
        raise UserError("import --capture: capture traces go with Kineto or Nsight Systems traces only")
    if model_config is not None and kind is not None:
        raise UserError("import --model-config: a model's config goes with Kineto or Nsight Systems traces only")
    if args.into is not None and args.device:
        raise UserError("import --device: the run given with --into already names its device")
    if args.cluster is not None:
        if kind is not None:
            raise UserError("import --cluster: only trace files (Kineto, nsys) are read on a cluster")
        _check_ray(args.cluster)
    device_spec = _device_spec(args.device)
    report = not args.no_report
    if kind == NCU:
        from kernelscope.commands.importers.ncu import import_ncu

        with steps.step(f"Importing {len(args.files)} Nsight Compute export{'s' if len(args.files) > 1 else ''}"):
            path = import_ncu(args.files, args.out, args.runs_dir, args.into, args.phase, report=report,
                              languages=args.lang, device_spec=device_spec)
    elif kind == NSYS_STATS:
        from kernelscope.commands.importers.nsys_stats import import_nsys_stats

        with steps.step(f"Importing {len(args.files)} kernel summar{'ies' if len(args.files) > 1 else 'y'}"):
            path = import_nsys_stats(args.files, args.out, args.runs_dir, report=report, languages=args.lang,
                                     device_spec=device_spec)
    else:
        from kernelscope.commands.importers.traces import import_traces

        # Stage by stage: reading (each chunk of a large file), attribution, tables, report.
        path = import_traces(args.files, args.out, args.runs_dir, report=report, languages=args.lang,
                             device_spec=device_spec, captures=captures, jobs=args.jobs, cluster=args.cluster,
                             model_config=model_config, batch=(args.batch_size, args.prompt_len),
                             recognise=args.model_recognition, steps=steps)
    path = Path(path).resolve()
    if not getattr(args, "quiet", False):
        from kernelscope.commands.run_summary import terminal_summary

        print(terminal_summary(path))
    print(path)  # the last line: the run directory, absolute
    return 0


def _warm_up_helpers(args: argparse.Namespace) -> None:
    """Start the fork server now, loading the readers, while this process loads its own libraries: helpers that
    read files (several files) or chunks of one (large files) then start at once instead of a second late, when
    half of their share would already be done here."""
    from kernelscope.load.native_reader import native_reader_built
    from kernelscope.report import figure_formats

    several = len(args.files) > 1 and args.jobs != 1 and args.cluster is None
    figures = not args.no_report and figure_formats.drawn()
    # The native reader decodes a large file by threads: a fork server would only take a core from it (~10% of a
    # 340 MB import on 2 cores), unless a report's figures will need one.
    large = (not native_reader_built() or figures) and any(
        path.is_file() and path.stat().st_size > 64 << 20 for path in args.files)
    if not (several or large):
        return
    from kernelscope.report.figure_jobs import start_fork_server

    # With a report, the figure helpers start from the same server: it loads matplotlib for them once.
    start_fork_server(["kernelscope.commands.importers.rank_files"], with_figures=figures)


def _jobs(text: str) -> int:
    value = positive_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("expected at least 1")
    return value


def _check_ray(address: str) -> None:
    """A clear line, before any work, when the cluster cannot be used."""
    import importlib.util

    if address != "local" and not address.startswith("ray://"):
        raise UserError(f"import --cluster: expected ray://host:port or local, got '{address}'")
    if importlib.util.find_spec("ray") is None:
        raise UserError("import --cluster: Ray is not installed (pip install 'kernelscope[ray]')")


def _model_config(args: argparse.Namespace) -> dict | None:
    """The checked config of --model-config (before any trace is read), and the flags that need it."""
    if args.model_config is None:
        if args.batch_size is not None or args.prompt_len is not None:
            raise UserError("import --batch-size/--prompt-len: they size the steps for --model-config; give it too")
        return None
    if args.prompt_len is not None and args.batch_size is None:
        raise UserError("import --prompt-len: give --batch-size too (the prefill step's tokens are their product)")
    from kernelscope.load.model_config import read_model_config

    return read_model_config(args.model_config)


def _capture_files(paths: list[Path]) -> list[Path]:
    """--capture arguments as trace files: a directory stands for the traces under it (sorted by path)."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))
            if not found:
                raise UserError(f"import --capture: {path}: no trace files (*.json, *.json.gz) in this directory")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise UserError(f"import --capture: {path}: no such file or directory")
    return files


def _device_spec(device: str | None) -> str | None:
    """The hardware key --device names, or a clear error."""
    if device is None:
        return None
    from kernelscope.analyze.hardware import find_spec

    spec = find_spec(device)
    if spec is None:
        raise UserError(f"import --device: no device matches '{device}' (see `kernelscope hw list`)")
    return spec.key
