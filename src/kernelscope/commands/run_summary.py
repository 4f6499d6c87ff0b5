"""What `profile` and `import` print when they finish (before the run's path, the last line): latency, the
bandwidth decode achieved, time per phase, the GPUs' idle time between kernels, the top kernels, attribution
coverage and the report's absolute path, in the spirit of gpt-fast's closing line. Read back from the run directory, so it says what the run holds."""

from __future__ import annotations

from pathlib import Path

import msgspec
import polars as pl

from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.costs.naming import kernel_labels
from kernelscope.analyze.idle_gaps import idle_gaps
from kernelscope.analyze.ranks.communication import communication
from kernelscope.contracts.run import Run
from kernelscope.contracts.trace_records import GraphReplays
from kernelscope.load import rundir
from kernelscope.report import formatting as fmt

TOP = 5


def plural(n: int, word: str, words: str | None = None) -> str:
    """`1 step`, `2 steps`, `1,024 launches`."""
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


def terminal_summary(run_dir: Path) -> str:
    """The closing lines of a command that wrote the run `run_dir`."""
    run_dir = run_dir.resolve()
    run = with_costs_and_names(rundir.read_run(run_dir, ops=False))
    summary = rundir.read_summary(run_dir)
    cpu = run.info.is_cpu
    unit, time_word = ("CPU ops", "CPU op time") if cpu else ("kernels", "device time")
    # Names come from the input: control characters (a terminal's escape sequences) are shown as spaces.
    ranks = run.kernels["rank"].n_unique() if run.kernels.height else 1
    lines = [f"kernelscope: {fmt.one_line(summary.model or 'imported trace')} on "
             f"{fmt.one_line(summary.device or 'an unnamed device')}"
             + (" (inferred from its properties)" if run.info.hardware.identified_by == "device properties" else "")
             + ((f", {ranks} summary files" if _formats(run) == {"nsys-stats"} else f", {ranks} ranks")
                if ranks > 1 else "")
             + (" (CPU ops stand in for kernels)" if cpu else "")]
    if (noisy := _noisy_line(summary)) is not None:
        lines.append(noisy)
    for file in run.info.trace.imported_files() if run.info.trace is not None else []:
        if file.unrecorded_device_calls:
            lines.append(f"  note: {fmt.one_line(file.file)} holds {file.unrecorded_device_calls:,} calls that start "
                         "GPU work but no GPU activity: the profiler did not record the device (torch.profiler "
                         "records it with ProfilerActivity.CUDA)")
    t = summary.timings
    if t.ttft_ms is not None:
        repeats = run.info.plain_timings.repeats if run.info.plain_timings is not None else None
        lines.append(f"  TTFT {fmt.ms(t.ttft_ms, 1)} · TPOT {fmt.ms(t.tpot_ms, 2)} · "
                     f"{fmt.number(t.tokens_per_s, 1)} tokens/s · end to end {fmt.ms(t.e2e_ms, 1)}"
                     + (f" (median of {plural(repeats, 'run')} without the profiler)" if repeats else ""))
    achieved = _decode_bandwidth(run.kernels, summary)
    if achieved is not None:
        per_step, rate = achieved
        ranks = run.kernels["rank"].n_unique()
        lines.append(f"  decode achieved {fmt.bandwidth(rate)}: {fmt.byte_amount(per_step)} of analytic bytes per "
                     f"step in the TPOT of {fmt.ms(t.tpot_ms, 2)}" + (f" (all {ranks} ranks together)" if ranks > 1 else ""))
    for name, p in summary.phases.items():
        total = (p.cpu_time_us if cpu else p.device_time_us) or 0.0
        per_step = (p.cpu_time_per_step_us if cpu else p.device_time_per_step_us)
        steps = (f", {plural(p.steps, 'step')}" + (f", {fmt.duration(per_step * 1e3)} per step" if per_step and p.steps > 1 else "")
                 if p.steps else "")
        lines.append(f"  {fmt.one_line(name)}: {fmt.duration(total * 1e3)} of {time_word}, {plural(p.kernel_count, unit[:-1], unit)}{steps}")
    labels = kernel_labels(run.kernels)
    if not cpu and (idle := _idle_line(run, labels)) is not None:
        lines.append(idle)
    shown = min(TOP, run.kernels["name"].n_unique())
    lines.append(f"  top {unit[:-1] if shown == 1 else f'{shown} {unit}'} by total time:")  # never "top 1 kernels"
    lines += [f"    {share:5.1f}%  {fmt.duration(total):>11}  {label}"
              for share, total, label in _top(run.kernels, labels)]
    lines.append(_attribution_line(run, summary, time_word))
    if (waits := _waits_line(run)) is not None:
        lines.append(waits)
    if (hint := _replay_hint(run.info.graph_replays, summary.device_time_us)) is not None:
        lines.append(hint)
    if (hint := _phase_hint(run, summary.op_coverage, summary.phase_coverage)) is not None:
        lines.append(hint)
    report = run_dir / "report"
    pages = [report / name for name in ("report.html", "report.md", "report.zh.html", "report.zh.md")]
    pages = [page for page in pages if page.exists()]
    if pages:
        others = ", ".join(page.name for page in pages[1:])
        lines.append(f"  report: {pages[0]}" + (f" (and {others} beside it)" if others else ""))
    return "\n".join(lines)


def _noisy_line(summary) -> str | None:
    """A noisy run says so before its numbers (summary.json `noise`): the timings whose repeats vary most."""
    noise = summary.noise
    if noise is msgspec.UNSET or noise is None or not noise.noisy:
        return None
    worst = sorted(((m.cv_pct or 0.0, key, m) for key, m in noise.metrics.items()
                    if m.noisy and key in _NOISE_NAMES), reverse=True)[:3]
    if not worst:
        return None
    said = ", ".join(f"{_NOISE_NAMES[key]} {m.cv_pct:.0f}% over "
                     f"{plural(m.repeats, 'step' if m.statistic == 'mean' else 'run')}" for _, key, m in worst)
    return (f"  NOISY RUN: repeats vary beyond the {noise.noisy_cv_pct:.0f}% limit (coefficient of variation: "
            f"{said}); small changes against another run cannot be told from this noise")


# The times a noisy line names (the rates are their inverses).
_NOISE_NAMES = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "end to end", "decode_step_us": "decode step"}


def _attribution_line(run: Run, summary, time_word: str) -> str:
    """Attribution coverage, phase and module said apart: a kernel summary (nsys stats) has phases from its file
    names or NVTX ranges but never modules or ops."""
    line = (f"  attribution: {100 * summary.phase_coverage:.1f}% of the {time_word} has a phase, "
            f"{100 * summary.module_coverage:.1f}% a module, {100 * summary.op_coverage:.1f}% a framework op")
    if _formats(run) == {"nsys-stats"}:
        line += " (kernel summaries name no modules or ops)"
    return line


def _formats(run: Run) -> set[str]:
    trace = run.info.trace
    if trace is None:
        return set()
    files = trace.imported_files()
    found = {str(f.format) for f in files if isinstance(f.format, str)}
    if isinstance(trace.format, str):
        found.add(trace.format)
    return found


def _waits_line(run: Run) -> str | None:
    """Runs of several ranks whose collectives were matched: the rank that waits longest inside them, and how much of
    that wait the other ranks' extra work explains (the report's communication section says more)."""
    if run.kernels["rank"].n_unique() < 2:
        return None
    comm = communication(run.kernels)
    if comm is None or comm.instances.height == 0:
        return None
    per_rank = comm.instances.group_by("rank").agg(pl.col("wait_ns").sum(), pl.col("imbalance_ns").sum(),
                                                   pl.col("dur_ns").sum())
    worst = per_rank.sort("wait_ns", "rank", descending=[True, False]).row(0, named=True)
    if not worst["wait_ns"]:
        return None
    return (f"  collectives: rank {worst['rank']} waits longest inside them, {fmt.duration(worst['wait_ns'])} "
            f"({100 * worst['wait_ns'] / worst['dur_ns']:.1f}% of its collective time); "
            f"{100 * worst['imbalance_ns'] / worst['wait_ns']:.1f}% of that wait is the other ranks' extra work, the "
            "rest their later start")


def _replay_hint(replays: GraphReplays | None, device_time_us: float | None) -> str | None:
    """Graph replays that got no module or op because no capture trace was given: how much time, and the option
    that gives it (the report says more)."""
    if replays is None or not device_time_us:
        return None
    missing = [u for u in replays.unattributed if u.captures_given is False]
    time_ns = sum(u.time_ns for u in missing)
    if not missing or not time_ns:
        return None
    count = sum(u.replays for u in missing)
    return (f"  graph replays: {100 * time_ns / (device_time_us * 1e3):.1f}% of the device time is in "
            f"{plural(count, 'replay')} with no module or op: give the trace that captured "
            f"{'it' if count == 1 else 'them'} with `import --capture CAPTURE_TRACE` (docs/importing.md)")


def _phase_hint(run: Run, op_coverage: float, phase_coverage: float) -> str | None:
    """An imported trace that marks no phase and no step: how to record one that does, in the words of the tool
    that recorded it (the report says more)."""
    attribution = run.info.attribution
    if run.info.source != "import" or phase_coverage > 0:
        return None
    formats = _formats(run)
    if formats & {"nsys-sqlite", "nsys-stats"}:
        return ("  phases: the recording marks none; push NVTX ranges named ks.phase:prefill and ks.phase:decode:<i> "
                "(torch.cuda.nvtx.range_push) around the forward passes, or export per-phase summaries named "
                "*prefill* / *decode* (docs/nsys.md)")
    # (phases read from the trace's regularities are no marker of its own: the hint still applies)
    if attribution is None or {attribution.phase.source, attribution.step.source} - {
            "none", "inferred from the trace's regularities"}:
        return None
    if not op_coverage:  # no kernel has a framework op: the trace holds no CPU activity to tie them to
        return ("  phases: none, nor ops: record the CPU side too (`activities=[CPU, CUDA]`) to tie kernels to "
                "ops, modules and steps (docs/importing.md)")
    return ("  phases: the trace marks none; record with `prof.step()` after each forward, ranges named prefill / "
            "decode, or `with_modules=True` (docs/importing.md)")


def _idle_line(run: Run, labels: pl.DataFrame) -> str | None:
    """The GPUs' idle time between kernels and the largest gap: what it followed, and how far into it the host called
    the launch that ended it (the report's Idle gaps section says more)."""
    gaps = idle_gaps(run.kernels, labels, top=1)
    if gaps is None:
        return None
    total, count = int(gaps.per_phase["idle_ns"].sum()), int(gaps.per_phase["gaps"].sum())
    largest = gaps.largest.row(0, named=True)
    wait = largest["host_wait_ns"]
    if wait is None:
        called = ""
    elif wait > 0:
        called = f"; the host called the launch that ended it {fmt.duration(wait)} into it"
    else:  # launched before the gap began: the GPU waited for something else (a copy, an event, another stream)
        called = "; the launch that ended it had been called before the gap began"
    return (f"  GPU idle between kernels: {fmt.duration(total)} in {plural(count, 'gap')}; the largest, "
            f"{fmt.duration(largest['gap_ns'])}, after {fmt.one_line(largest['before'])}{called}")


def _top(kernels: pl.DataFrame, labels: pl.DataFrame) -> list[tuple[float, float, str]]:
    labels = labels.head(TOP)  # (kernel_labels: by total time)
    total = float(kernels["dur_ns"].sum()) or 1.0
    return [(100 * row["total_ns"] / total, float(row["total_ns"]), fmt.one_line(row["label"] or row["name"]))
            for row in labels.iter_rows(named=True)]


def _decode_bandwidth(kernels: pl.DataFrame, summary) -> tuple[float, float] | None:
    """Decode's analytic bytes per step and the rate they make over the measured time per output token."""
    decode = summary.phases.get("decode")
    tpot = summary.timings.tpot_ms
    if decode is None or not decode.steps or not tpot:
        return None
    moved = kernels.filter(pl.col("phase") == "decode")["bytes_moved"].sum()
    if not moved:
        return None
    per_step = float(moved) / decode.steps
    return per_step, per_step / (tpot / 1e3)
