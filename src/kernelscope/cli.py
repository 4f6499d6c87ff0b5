"""Command-line interface: parse arguments, call the commands, show progress. Thin by design."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kernelscope import __version__
from kernelscope.errors import UserError


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelscope",
        description="Where an LLM inference spends its time, kernel by kernel.",
    )
    parser.add_argument("--version", action="version", version=f"kernelscope {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "profile",
        help="run a model, record every kernel, write a run directory and a report",
        description=(
            "Run a model with transformers generate() (or kernelscope's engine: --backend engine), record it "
            "with torch.profiler, attribute every "
            "kernel to phase / decode step / layer / module / op, and write a run directory with a report. "
            "Defaults: on a CUDA GPU qwen2-1.5b in bfloat16; on CPU the tiny preset in float32; "
            "batch 1, prompt 128, 64 new tokens."
        ),
    )
    p.add_argument("--model", help="preset name (see `kernelscope presets`) or a local HF checkpoint directory")
    p.add_argument("--backend", choices=["hf", "engine"], default="hf",
                   help="hf: transformers generate() (default); engine: kernelscope's own engine (Qwen2 and Llama; "
                        "Triton kernels and a CUDA-graph decode on GPU, PyTorch reference ops on CPU)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    p.add_argument("--dtype", help="bfloat16/bf16, float16/fp16 or float32/fp32 (default: bf16 on GPU, fp32 on CPU)")
    p.add_argument("--batch-size", type=_positive_int, default=1, help="sequences per batch (default 1)")
    p.add_argument("--prompt-len", type=_positive_int, help="prompt tokens (default 128; vision models: the processor's)")
    p.add_argument("--new-tokens", type=_positive_int, default=64, help="tokens to generate, EOS ignored (default 64)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0: greedy (default); above 0: sample at this temperature, seeded by --seed")
    p.add_argument("--no-repeat-ngram-size", type=_positive_int, default=0, metavar="N",
                   help="ban repeated N-grams as transformers does (default 0: off)")
    p.add_argument("--warmup", type=_positive_int, default=1, help="unprofiled warm-up generations (default 1)")
    p.add_argument("--repeats", type=_positive_int, default=3,
                   help="timed generations per mode, without the profiler; medians are reported (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed for random weights and prompt ids (default 0)")
    v = p.add_argument_group("images (vision models such as deepseek-ocr-2; see docs/ocr.md)")
    v.add_argument("--image", nargs="+", type=Path, default=[], metavar="PATH", dest="image_paths",
                   help="image files or directories of them: one generation per image")
    v.add_argument("--images", type=_positive_int, metavar="N",
                   help="synthetic document pages drawn from --seed, one generation each (default 1)")
    v.add_argument("--base-size", type=_positive_int, default=1024, help="side of the global view (default 1024)")
    v.add_argument("--image-size", type=_positive_int, default=768,
                   help="side of each crop, the processor's tile_size (default 768)")
    v.add_argument("--crop-mode", action=argparse.BooleanOptionalAction, default=True,
                   help="also cut large images into crops (default: on)")
    _add_output_args(p)

    i = sub.add_parser(
        "import",
        help="make a run directory from traces made elsewhere: Kineto, Nsight Systems, Nsight Compute",
        description=(
            "Read Kineto / torch.profiler traces (.json or .json.gz) written by any program (vLLM, SGLang, "
            "training jobs, kernelscope itself), Nsight Systems SQLite exports or .nsys-rep reports, `nsys stats` "
            "kernel summaries (CSV / TSV; one file per phase, named *prefill* / *decode*), or Nsight Compute "
            "exports into a run directory. Several trace files become ranks of one run. Phases and modules are "
            "known only if the program pushed kernelscope's ranges (profiler or NVTX ranges)."
        ),
    )
    i.add_argument("files", nargs="+", type=Path, metavar="FILE",
                   help="Kineto traces, nsys SQLite exports / .nsys-rep, nsys stats CSVs, or Nsight Compute "
                        "exports (CSV, .ncu-rep, or a directory of <kernel>/ncu.details.csv)")
    i.add_argument("--into", type=Path, metavar="RUN",
                   help="add Nsight Compute exports to this existing run instead of making a new one")
    i.add_argument("--phase", default="decode", choices=["prefill", "decode"],
                   help="with --into: the phase the exports measured (default decode)")
    _add_output_args(i)

    r = sub.add_parser(
        "report",
        help="re-render a run's report from its stored tables",
        description="Re-render report/ of a run directory from its tables, without profiling again.",
    )
    r.add_argument("run", type=Path, metavar="RUN", help="run directory")
    r.add_argument("--top", type=_positive_int, default=20, help="kernels per phase in the top tables (default 20)")
    _add_lang_arg(r)

    c = sub.add_parser(
        "compare", help="compare runs side by side: GPUs, configurations, engines, before / after",
        description=(
            "Compare run directories side by side (the first is the baseline): setup, timings, device time per "
            "phase, layer → module → kernel per layer per step, kernel mix, and kernels matched across runs by the "
            "job they do (module within the layer + kind of work), with ratios, changes and what changed most. "
            "Writes compare.md / compare.zh.md, HTML pages, figures/, tables/*.csv and compare.json."
        ),
    )
    c.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run directories (at least two)")
    c.add_argument("--labels", type=_labels, help="comma-separated names of the runs in the report "
                   "(default: what tells them apart, e.g. h100,h200 or b1,b8)")
    c.add_argument("--out", type=Path, help="directory to create (default: RUNS_DIR/compare-<labels>-<time>)")
    c.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where the comparison goes (default ./runs)")
    c.add_argument("--top", type=_positive_int, default=20, help="matched kernel rows per phase (default 20)")
    _add_lang_arg(c)

    e = sub.add_parser(
        "export", help="write a run's kernels as an nsys kernel summary (CSV) or a Perfetto trace",
        description=(
            "kern-sum: nsys stats cuda_gpu_kern_sum's columns (CSV) plus library, category and friendly name; "
            "kern-sum-nvtx: the same per phase range; perfetto: a Chrome / Perfetto trace (gzipped JSON) whose "
            "kernels carry kernelscope's attribution in their args, readable again by `kernelscope import`. "
            "Default file: RUN/export/. See docs/export.md."
        ),
    )
    e.add_argument("run", type=Path, metavar="RUN", help="run directory")
    e.add_argument("--format", required=True, choices=["kern-sum", "kern-sum-nvtx", "perfetto"], dest="fmt",
                   help="what to write")
    e.add_argument("--out", type=Path, help="file to write, or a directory for the default file name")
    e.add_argument("--phase", help="kern-sum formats: this phase only (prefill, decode, or a model stage)")

    w = sub.add_parser(
        "whatif", help="project a measured run onto other hardware, real or hypothetical",
        description=(
            "Project every kernel of a measured GPU run onto a target (a known device, a SPEC.toml, and/or --set "
            "values) with the fitted projection model; shows the calibration on the measuring device, the "
            "projection per phase and kind of work, what each design option buys, the bandwidth and compute that "
            "latency goals need, and sweeps. Writes whatif.md / whatif.zh.md, HTML, figures, tables/*.csv and "
            "whatif.json into RUN/whatif/<target>/ (or --out). See docs/whatif.md."
        ),
    )
    w.add_argument("run", type=Path, metavar="RUN", help="run directory of a GPU run")
    w.add_argument("--hw", metavar="NAME|SPEC.toml",
                   help="target: a key or name from `kernelscope hw list`, or a TOML spec (default: the run's device)")
    w.add_argument("--set", dest="settings", metavar="K=V,…",
                   help="change the target: bw=2TB/s, bf16=400TFLOPS (any precision), sram=256MB, sram_bw=20TB/s, "
                        "l2=128MB, latency=0.5 (per-kernel latency scale), fuse=yes, weights=fp8|int8|fp4")
    w.add_argument("--sweep", action="append", metavar="K=START:STOP:N",
                   help="vary one quantity (bw in TB/s, precisions in TFLOP/s, sram/l2 in MB); repeatable "
                        "(default: bandwidth and BF16 compute from 0.25× to 4× the target's)")
    w.add_argument("--model", type=Path, dest="model_file", metavar="FILE",
                   help="projection model from `kernelscope hw fit` (default: the shipped one)")
    w.add_argument("--out", type=Path, help="directory to create (default: RUN/whatif/<target>, replaced)")
    _add_lang_arg(w)

    sub.add_parser("presets", help="list model presets", description="List the model presets.")

    k = sub.add_parser(
        "kernels", help="name kernels: library, category, friendly name, description",
        description=(
            "Look kernel names up in the kernel catalog (any profiler's spelling: Kineto, Nsight, base or "
            "mangled). Names come from the arguments, or one per line on stdin when none are given."
        ),
    )
    k.add_argument("names", nargs="*", metavar="NAME", help="kernel names (default: read stdin)")
    k.add_argument("--json", action="store_true", help="one JSON object per name instead of a table")

    n = sub.add_parser(
        "ncu", help="measure the top kernels of a run with Nsight Compute",
        description=(
            "Re-run a run's workload under Nsight Compute, gated on the phase's NVTX ranges and on the top kernels' "
            "names, profile the first launches of each launch configuration (--clock-control none), and add the "
            "counters to the run (ncu.parquet, ncu_metrics.parquet, ncu/) and its report."
        ),
    )
    n.add_argument("run", type=Path, metavar="RUN", help="run directory made by `kernelscope profile` on a GPU")
    n.add_argument("--top", type=_positive_int, default=20, help="kernels by total time in the phase (default 20)")
    n.add_argument("--phase", default="decode",
                   help="a phase of the run: prefill, decode, or a model stage such as sam_encoder (default decode)")
    n.add_argument("--launches", type=_positive_int, default=3,
                   help="launches profiled per launch configuration (default 3)")
    n.add_argument("--sections", help="comma-separated ncu sections (default: SpeedOfLight, MemoryWorkloadAnalysis, "
                   "Occupancy, SpeedOfLight_RooflineChart, SchedulerStats, LaunchStats)")
    n.add_argument("--timeout", type=_positive_int, default=1800, help="seconds before ncu is stopped (default 1800)")

    h = sub.add_parser("hw", help="hardware database and measured ceilings",
                       description="Datasheet peaks of known devices, and ceilings measured on this machine.")
    hw_sub = h.add_subparsers(dest="hw_command", required=True, metavar="ACTION")
    hw_sub.add_parser("list", help="list known devices", description="List the devices of the hardware database.")
    show = hw_sub.add_parser("show", help="one device's specs and measurements",
                             description="Show a device's datasheet values, sources and any measured ceilings.")
    show.add_argument("name", help="a key from `hw list` (e.g. h100-sxm) or a device name (e.g. 'NVIDIA H200')")
    cal = hw_sub.add_parser(
        "calibrate", help="measure copy bandwidth and GEMM throughput here",
        description=(
            "Measure achievable copy bandwidth (bytes read + written) and large-GEMM throughput per dtype on the "
            "present device (a GPU, or the CPU), and store them; reports then use them instead of datasheet peaks."
        ),
    )
    cal.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    cal.add_argument("--out", type=Path,
                     help="where to write the JSON (default: $KERNELSCOPE_CALIBRATION_DIR or ~/.cache/kernelscope/calibration)")
    cal.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    fit = hw_sub.add_parser(
        "fit", help="fit the what-if projection model on measured runs",
        description=(
            "Fit the projection model's per-kernel latency and efficiencies per kind of work (and each device's "
            "latency scale) on GPU run directories, print each run projected onto its own device, and write the "
            "model (TOML) for `kernelscope whatif --model`."
        ),
    )
    fit.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="GPU run directories")
    fit.add_argument("--out", type=Path, help="where to write the model (default: print the calibration only)")
    return parser


def _labels(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


def _languages(text: str) -> tuple[str, ...]:
    languages = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [lang for lang in languages if lang not in ("en", "zh")]
    if unknown or not languages:
        raise argparse.ArgumentTypeError(f"languages are en and zh, got '{text}'")
    return languages


def _add_lang_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lang", type=_languages, default=("en", "zh"),
                   help="report languages, comma-separated: en, zh (default: both)")


def _add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="run directory to create (default: RUNS_DIR/<model>-<device>-<time>)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where new runs go (default ./runs)")
    p.add_argument("--no-report", action="store_true", help="write tables only, no report/")
    _add_lang_arg(p)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from kernelscope.progress import SILENT, Steps

    steps = SILENT if args.quiet else Steps()
    try:
        return _dispatch(args, steps)
    except UserError as exc:
        print(f"kernelscope: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kernelscope: interrupted", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace, steps) -> int:
    if args.command == "profile":
        from kernelscope.commands.profile import ProfileOptions, run_profile

        options = ProfileOptions(
            model=args.model, backend=args.backend, device=args.device, dtype=args.dtype, batch_size=args.batch_size,
            prompt_len=args.prompt_len, new_tokens=args.new_tokens, warmup=args.warmup, repeats=args.repeats,
            seed=args.seed, temperature=args.temperature, no_repeat_ngram_size=args.no_repeat_ngram_size,
            image_paths=tuple(args.image_paths), images=args.images, base_size=args.base_size,
            image_size=args.image_size, crop_mode=args.crop_mode,
            out=args.out, runs_dir=args.runs_dir, report=not args.no_report, languages=args.lang,
        )
        path = run_profile(options, steps)
        print(path)
    elif args.command == "import":
        from kernelscope.commands.import_ncu import import_ncu, is_ncu_input
        from kernelscope.commands.import_nsys_stats import import_nsys_stats
        from kernelscope.commands.import_trace import import_traces
        from kernelscope.load.nsys_stats import is_nsys_stats

        # Text tables (.csv, .tsv, .txt) that are not Nsight Compute exports go to the nsys stats reader, which
        # names what a file lacks; everything else is a trace (Kineto JSON, nsys SQLite, .nsys-rep).
        kinds = {"ncu" if is_ncu_input(f) else "nsys-stats"
                 if is_nsys_stats(f) or f.suffix.lower() in (".csv", ".tsv", ".txt") else "trace"
                 for f in args.files}
        if len(kinds) > 1:
            raise UserError("import: give one kind of file at a time: traces (Kineto JSON, nsys SQLite or "
                            ".nsys-rep), nsys stats kernel summaries, or Nsight Compute exports")
        with steps.step(f"Importing {len(args.files)} file(s)"):
            if kinds == {"ncu"}:
                path = import_ncu(args.files, args.out, args.runs_dir, args.into, args.phase,
                                  report=not args.no_report, languages=args.lang)
            elif args.into is not None:
                raise UserError("import --into: only Nsight Compute exports can be added to an existing run")
            elif kinds == {"nsys-stats"}:
                path = import_nsys_stats(args.files, args.out, args.runs_dir, report=not args.no_report,
                                         languages=args.lang)
            else:
                path = import_traces(args.files, args.out, args.runs_dir, report=not args.no_report,
                                     languages=args.lang)
        print(path)
    elif args.command == "compare":
        from kernelscope.commands.compare import compare_runs

        with steps.step(f"Comparing {len(args.runs)} runs"):
            path = compare_runs(args.runs, args.labels, args.out, args.runs_dir, top_n=args.top,
                                languages=args.lang)
        print(path)
    elif args.command == "export":
        from kernelscope.commands.export import export_run

        with steps.step(f"Exporting {args.fmt}"):
            path = export_run(args.run, args.fmt, args.out, phase=args.phase)
        print(path)
    elif args.command == "whatif":
        from kernelscope.commands.whatif import run_whatif

        with steps.step("Projecting"):
            path = run_whatif(args.run, args.hw, args.settings, args.sweep, args.model_file, args.out, args.lang)
        print(path)
    elif args.command == "report":
        from kernelscope.commands.report import rerender

        with steps.step("Rendering the report"):
            path = rerender(args.run, args.top, args.lang)
        print(path.parent.parent)
    elif args.command == "hw":
        from kernelscope.commands import hw

        if args.hw_command == "list":
            print(hw.list_specs())
        elif args.hw_command == "show":
            print(hw.show_spec(args.name))
        elif args.hw_command == "fit":
            with steps.step(f"Fitting the projection model on {len(args.runs)} runs"):
                text, written = hw.fit_projection(args.runs, args.out)
            print(text)
            if written:
                print(written)
        else:
            with steps.step("Measuring copy bandwidth and GEMM throughput"):
                result, path = hw.run_calibration(args.device, args.out, args.quick)
            print(hw.describe_calibration(result))
            print(path)
    elif args.command == "ncu":
        from kernelscope.commands.ncu import run_ncu

        sections = [x.strip() for x in args.sections.split(",") if x.strip()] if args.sections else None
        path = run_ncu(args.run, top=args.top, phase=args.phase, launches=args.launches, sections=sections,
                       timeout=args.timeout, steps=steps)
        print(path.resolve())
    elif args.command == "kernels":
        from kernelscope.commands.kernels import as_json_lines, as_table, read_names

        names = read_names(args.names, None if args.names or sys.stdin.isatty() else sys.stdin)
        print(as_json_lines(names) if args.json else as_table(names))
    elif args.command == "presets":
        from kernelscope.workload.presets import load_presets

        presets = load_presets().values()
        name_width = max(len(p.name) for p in presets)
        type_width = max(len(p.model_type) for p in presets)
        for preset in presets:
            print(f"{preset.name:{name_width}s} {preset.model_type:{type_width}s} {preset.description}")
    return 0
