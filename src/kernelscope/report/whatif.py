"""Render a what-if study: whatif.md / whatif.zh.md, self-contained HTML, figures/ (sweeps), tables/*.csv and
whatif.json. Structure in templates/whatif.md.j2, words in messages/whatif.<lang>.toml."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
from jinja2 import Environment

from kernelscope import ranges
from kernelscope.analyze.projection.accelerator import MIN_COST_COVERAGE
from kernelscope.analyze.projection.projection import ProjectionModel, Target, default_model
from kernelscope.analyze.projection.whatif import WhatIf, dominant_groups
from kernelscope.contracts.run_info import Workload
from kernelscope.report import figure_formats
from kernelscope.report import formatting as fmt
from kernelscope.report.html import markdown_to_html
from kernelscope.report.languages import LANGUAGES
from kernelscope.report.templating import (
    message_catalog,
    template_environment,
    text_template,
    write_csv_tables,
)
from kernelscope.report.whatif_energy import energy_context, energy_json
from kernelscope.report.whatif_headline import headline_table
from kernelscope.report.whatif_range import estimate_range, held_out, spread_context

MARKDOWN_FILES = {"en": "whatif.md", "zh": "whatif.zh.md"}
HTML_FILES = {"en": "whatif.html", "zh": "whatif.zh.html"}
# Calibration holds when every phase's projection on the measuring device is within this of the measurement.
CALIBRATION_BOUND = 0.15

Cell = Callable[[dict[str, Any]], str]


def tbs(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1e12:,.2f} TB/s" if value >= 0.1e12 else f"{value / 1e9:,.1f} GB/s"


def tflops(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1e12:,.0f} TFLOP/s" if value >= 10e12 else f"{value / 1e12:,.2f} TFLOP/s"


def times(value: float | None) -> str:
    return "–" if fmt.missing(value) else f"{value:.2f}×"


def render_whatif(study: WhatIf, model: ProjectionModel, workload: Workload | None, run_path: Path, out_dir: Path,
                  languages: tuple[str, ...] = LANGUAGES) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = _write_csvs(study, out_dir / "tables")
    figure_links: dict[str, str] = {}
    # No chart with --figure-formats none.
    swept = study.sweeps["parameter"].to_list() if study.sweeps.height and figure_formats.drawn() else []
    if swept:
        from kernelscope.report import figures  # matplotlib: loaded only where a figure is drawn
    for parameter in dict.fromkeys(swept):
        for phase in (ranges.DECODE, ranges.PREFILL):
            mark = (getattr(study.target, parameter) if hasattr(study.target, parameter)
                    else study.target.flops.get(parameter))
            paths = figures.sweep_chart(study.sweeps, parameter, phase, f"{phase}: projected time per step vs {parameter} "
                                        f"({study.target.name})", out_dir / "figures", f"sweep_{parameter}_{phase}", mark)
            if paths:
                figure_links[f"{parameter}_{phase}"] = fmt.Markdown(f"figures/{paths[0].name}")
                written += paths
    summary = _key_figures(study, run_path)
    (out_dir / "whatif.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    written.append(out_dir / "whatif.json")
    for lang in languages:
        env = _env(lang)
        context = _context(study, model, workload, run_path, lang)
        context["figures"] = figure_links
        text = env.get_template("whatif.md.j2").render(**context)
        (out_dir / MARKDOWN_FILES[lang]).write_text(text, encoding="utf-8")
        title = text_template(env, "text:title", message_catalog("whatif", lang)["text"]["title"]).render(**context)
        (out_dir / HTML_FILES[lang]).write_text(markdown_to_html(text, out_dir, lang=lang, title=title), encoding="utf-8")
        written += [out_dir / MARKDOWN_FILES[lang], out_dir / HTML_FILES[lang]]
    return written


def _env(lang: str) -> Environment:
    words = message_catalog("whatif", lang)
    return template_environment(words, dict(duration=fmt.duration, times=times, tbs=tbs, tflops=tflops,
                                            percent=fmt.percent, ms=fmt.ms, term=lambda v: words["terms"].get(v, v)),
                                cache_namespace=f"whatif-{lang}")


# A phase whose device time the model carries at its measured duration (kernels without a cost model: ops without
# shapes the model reads, or no op at all, as in CUDA-graph replays) for more than this share is not projected:
# its calibration would hold by construction and every design option would change only the rest.
# The same bound as the report's hardware sizing (accelerator.MIN_COST_COVERAGE), seen from the carried side.
MAX_CARRIED_PCT = 100.0 * (1.0 - MIN_COST_COVERAGE)


def carried_phases(calibration: pl.DataFrame) -> list[str]:
    """Phases (other than unknown) the model mostly carries rather than projects."""
    known = calibration.filter((pl.col("phase") != ranges.UNKNOWN) & (pl.col("carried_pct") > MAX_CARRIED_PCT))
    return known["phase"].to_list()


def calibration_holds(calibration: pl.DataFrame) -> bool:
    """Every phase projected onto the measuring device within the bound, and none of them mostly carried (that
    would hold whatever the model)."""
    known = calibration.filter(pl.col("phase") != ranges.UNKNOWN)["ratio"].drop_nulls()
    return (bool(known.len()) and bool(((known - 1).abs() <= CALIBRATION_BOUND).all())
            and not carried_phases(calibration))


def _context(s: WhatIf, model: ProjectionModel, workload: Workload | None, run_path: Path, lang: str) -> dict[str, Any]:
    tables = _tables(s, model, lang)
    phases = s.phases.filter(pl.col("phase") != ranges.UNKNOWN)
    decode = phases.filter(pl.col("phase") == ranges.DECODE)
    prefill = phases.filter(pl.col("phase") == ranges.PREFILL)
    return {
        "lang": lang, "source": s.source, "target": s.target, "options": s.options, "run_path": str(run_path),
        "workload": msgspec.to_builtins(workload) if workload is not None else {}, "tables": tables,
        "timings": s.timings,
        "decode": decode.row(0, named=True) if decode.height else None,
        "prefill": prefill.row(0, named=True) if prefill.height else None,
        "calibrated": calibration_holds(s.calibration), "bound_pct": 100 * CALIBRATION_BOUND,
        "carried": carried_phases(s.calibration), "max_carried_pct": MAX_CARRIED_PCT,
        "same_device": s.source.name == s.target.name and s.source.bandwidth == s.target.bandwidth,
        "fit": model.fit, "device_latency": model.device_latency, "parallel": s.parallel,
        "efficiency_above_one": _efficiency_above_one(s.kernels),
        "bounds": bounds_shown(s.groups),
        "spread": spread_context(s),
        "energy": energy_context(s.energy, lang, _term_of(lang)),
    }


def _term_of(lang: str) -> Callable[[Any], str]:
    terms = {**message_catalog("", lang)["terms"], **message_catalog("whatif", lang)["terms"]}
    return lambda value: fmt.plain(terms.get(value, value) if isinstance(value, str) else value)




def _efficiency_above_one(kernels: pl.DataFrame) -> dict[str, Any] | None:
    """The kinds of work in the kernel tables whose fitted memory efficiency exceeds 1, with the highest."""
    above = kernels.filter(pl.col("memory_efficiency") > 1)
    if not above.height:
        return None
    return {"groups": sorted(set(above["group"].to_list())), "highest": float(above["memory_efficiency"].max())}


def _tables(s: WhatIf, model: ProjectionModel, lang: str) -> dict[str, Any]:
    """Every table of the study as Markdown in `lang`."""
    words = message_catalog("whatif", lang)
    # The report's own terms name phases such as model stages ("SAM encoder"); what-if terms come on top.
    h, terms = words["headers"], {**message_catalog("", lang)["terms"], **words["terms"]}

    def term(value: Any) -> str:
        return fmt.plain(terms.get(value, value) if isinstance(value, str) else value)

    phases = s.phases.filter(pl.col("phase") != ranges.UNKNOWN)
    return {**_overview_tables(s, model, h, term, phases), **_detail_tables(s, h, term, words, phases),
            "parallel": _parallel_tables(s, h, term, words) if s.parallel is not None else None,
            "headline": headline_table(s, lang)}


def _parallel_tables(s: WhatIf, h: dict[str, str], term: Cell, words: dict[str, Any]) -> dict[str, str]:
    """The parallel what-if's tables: per phase, the link model per kind of collective, per collective."""
    p = s.parallel
    dur = fmt.duration
    on_n = h["on_ranks"].format(ranks=p.target_ranks)
    on_r = h["on_ranks"].format(ranks=p.source_ranks)
    phases = p.phases.filter(pl.col("phase") != ranges.UNKNOWN)
    return {
        "phases": _table(phases, [
            (h["phase"], lambda r: term(r["phase"])), (h["compute_measured"], lambda r: dur(r["measured_compute_ns"])),
            (h["comm_measured"], lambda r: dur(r["measured_transfer_ns"])),
            (h["wait_measured"], lambda r: dur(r["measured_wait_ns"])),
            (f"{on_r}: {h['projected']}", lambda r: dur(r["baseline_total_ns"])),
            (f"{on_n}: {h['sharded']}", lambda r: dur(r["projected_sharded_ns"])),
            (f"{on_n}: {h['replicated']}", lambda r: dur(r["projected_replicated_ns"])),
            (f"{on_n}: {h['comm_modelled']}", lambda r: dur(r["projected_comm_ns"])),
            (f"{on_n}: {h['projected']}", lambda r: dur(r["projected_total_ns"])),
            (h["speedup"], lambda r: times(r["speedup"]))], numeric_from=1),
        "links": _table([{"kind": f.kind, "alpha": f.latency_ns, "eta": f.efficiency, "measured": f.efficiency_measured,
                          "instances": f.instances} for f in p.fits], [
            (h["collective"], lambda r: fmt.code(r["kind"])), (h["instances"], lambda r: fmt.number(r["instances"])),
            (h["alpha"], lambda r: dur(r["alpha"])), (h["eta"], lambda r: fmt.number(r["eta"], 3)),
            (h["eta_from"], lambda r: words["text"]["eta_fitted" if r["measured"] else "eta_default"])],
            numeric_from=1, numeric_to=3),
        "collectives": _table(p.collectives.filter(pl.col("phase") != ranges.UNKNOWN), [
            (h["phase"], lambda r: term(r["phase"])), (h["collective"], lambda r: fmt.code(r["kind"])),
            (h["message"], lambda r: "–" if r["bytes"] is None else f"{r['bytes'] / 1e3:,.1f} KB"),
            (h["per_step"], lambda r: fmt.number(r["per_step"], 1)),
            (h["comm_measured"], lambda r: dur(r["measured_transfer_ns"])),
            (h["wait_measured"], lambda r: dur(r["measured_wait_ns"])),
            (h["model_source"], lambda r: dur(r["modelled_source_ns"])),
            (on_n, lambda r: dur(r["projected_ns"]))], numeric_from=2),
    }


def _overview_tables(s: WhatIf, model: ProjectionModel, h: dict[str, str], term: Cell,
                     phases: pl.DataFrame) -> dict[str, Any]:
    pct = lambda v: fmt.percent(v, 1)  # noqa: E731
    return {
        "target": _table(_target_rows(s.source, s.target), [
            (h["quantity"], lambda r: term(r["quantity"])), (h["source_device"], lambda r: r["source"]),
            (h["target"], lambda r: r["target"]), (h["from"], lambda r: term(r["from"]))], numeric_from=None),
        "calibration": _table(s.calibration.filter(pl.col("phase") != ranges.UNKNOWN), [
            (h["phase"], lambda r: term(r["phase"])), (h["steps"], lambda r: fmt.number(r["steps"])),
            (h["measured"], lambda r: fmt.duration(r["measured_per_step_ns"])),
            (h["model"], lambda r: fmt.duration(r["projected_per_step_ns"])),
            (h["ratio"], lambda r: fmt.number(r["ratio"], 3)), (h["carried"], lambda r: pct(r["carried_pct"]))],
            numeric_from=1),
        "phases": _table(phases, [
            (h["phase"], lambda r: term(r["phase"])),
            (h["measured_on"].format(device=s.source.name), lambda r: fmt.duration(r["measured_per_step_ns"])),
            (h["model_on"].format(device=s.source.name), lambda r: fmt.duration(r["source_model_ns"])),
            (h["model_on"].format(device=s.target.name), lambda r: fmt.duration(r["target_model_ns"])),
            (h["estimate"], lambda r: fmt.duration(r["estimate_ns"])),
            (h["estimate_range"], lambda r: estimate_range(r["estimate_low_ns"], r["estimate_high_ns"])),
            (h["speedup"], lambda r: times(r["speedup"]))],
            numeric_from=1),
        "factors": _table(pl.DataFrame([(g, f.latency_ns, f.memory_efficiency, f.compute_efficiency)
                                        for g, f in model.factors.items()],
                                       schema=["group", "latency_ns", "memory_efficiency", "compute_efficiency"],
                                       orient="row"), [
            (h["work"], lambda r: term(r["group"])), (h["latency"], lambda r: fmt.duration(r["latency_ns"])),
            (h["memory_efficiency"], lambda r: fmt.number(r["memory_efficiency"], 3)),
            (h["compute_efficiency"], lambda r: fmt.number(r["compute_efficiency"], 3))], numeric_from=1),
    }


def bounds_shown(groups: pl.DataFrame) -> list[str]:
    """The bound columns of the kinds-of-work table: latency, memory and compute always; carried and fused only
    where some kind of work has time there (fusion is a design option: without it nothing is fused away)."""
    return [b for b in ("latency", "memory", "compute", "carried", "fused")
            if b in ("latency", "memory", "compute") or (groups[f"{b}_per_step_ns"].fill_null(0) > 0).any()]


def _detail_tables(s: WhatIf, h: dict[str, str], term: Cell, words: dict[str, Any],
                   phases: pl.DataFrame) -> dict[str, Any]:
    pct = lambda v: fmt.percent(v, 1)  # noqa: E731
    return {
        "groups": {phase: _table(s.groups.filter(pl.col("phase") == phase), [
            (h["work"], lambda r: term(r["group"])), (h["launches"], lambda r: fmt.number(r["launches_per_step"], 1)),
            (h["measured"], lambda r: fmt.duration(r["measured_per_step_ns"])),
            (h["projected"], lambda r: fmt.duration(r["projected_per_step_ns"])),
            (h["share"], lambda r: pct(r["projected_pct"])),
            *((h[f"bound_{b}"], (lambda r, b=b: fmt.duration(r[f"{b}_per_step_ns"])))
              for b in bounds_shown(s.groups))], numeric_from=1)
            for phase in phases["phase"]},
        # Each kernel's projection with its terms: latency + max(memory, compute), from bytes and FLOPs at the
        # fitted efficiencies of its kind of work; a projection far from the measured time says why.
        "kernels": {phase: _table(s.kernels.filter(pl.col("phase") == phase), [
            (h["kernel"], lambda r: fmt.plain(r["label"] or r["friendly_name"])), (h["work"], lambda r: term(r["group"])),
            (h["launches"], lambda r: fmt.number(r["launches_per_step"], 1)),
            (h["measured"], lambda r: fmt.duration(r["measured_per_step_ns"])),
            (h["projected"], lambda r: fmt.duration(r["projected_per_step_ns"])),
            (h["latency_term"], lambda r: fmt.duration(r["latency_per_step_ns"])),
            (h["memory_term"], lambda r: fmt.duration(r["memory_per_step_ns"])),
            (h["compute_term"], lambda r: fmt.duration(r["compute_per_step_ns"])),
            (h["bytes"], lambda r: fmt.byte_amount(r["bytes_projected_per_step"])),
            (h["flops"], lambda r: fmt.flop_amount(r["flops_per_step"])),
            (h["memory_efficiency"], lambda r: fmt.number(r["memory_efficiency"], 2)),
            (h["compute_efficiency"], lambda r: fmt.number(r["compute_efficiency"], 2)),
            (h["bound"], lambda r: term(r["bound"])),
            (h["why"], lambda r: _why(r, words))], numeric_from=2, numeric_to=11) for phase in phases["phase"]},
        "scenarios": _table(s.scenarios, [
            (h["scenario"], lambda r: term(r["scenario"])), (h["what"], lambda r: term(r["what"])),
            (h["decode"], lambda r: fmt.duration(r["decode_ns"])),
            (h["decode_speedup"], lambda r: words["text"]["already_applied"] if r["applied"] else times(r["decode_speedup"])),
            (h["prefill"], lambda r: fmt.duration(r["prefill_ns"])),
            (h["prefill_speedup"], lambda r: words["text"]["already_applied"] if r["applied"] else times(r["prefill_speedup"]))],
            numeric_from=2),
        "requirements": _table(s.requirements, [
            (h["phase"], lambda r: term(r["phase"])), (h["goal"], lambda r: fmt.ms(r["goal_ms"], 1)),
            (h["projected"], lambda r: fmt.ms(r["projected_ms"], 3)),
            (h["bandwidth_needed"], lambda r: tbs(r["bandwidth_needed"]) if r["bandwidth_needed"] else words["text"]["unreachable"]),
            (h["bandwidth_floor"], lambda r: fmt.ms(r["bandwidth_floor_ms"], 3)),
            (h["compute_needed"], lambda r: tflops(r["bf16_needed"]) if r["bf16_needed"] else words["text"]["unreachable"]),
            (h["compute_floor"], lambda r: fmt.ms(r["compute_floor_ms"], 3))], numeric_from=1),
        "sweeps": _sweep_tables(s, h, term),
    }


def _why(row: dict[str, Any], words: dict[str, Any]) -> str:
    """The reason of a projection far from the measured time, with its numbers (empty when it is near)."""
    why = row.get("why")
    if not why:
        return ""
    ratio = (row["projected_per_step_ns"] or 0) / (row["measured_per_step_ns"] or 1)
    text = words["text"][f"why_{why}"].format(
        ratio=f"{ratio:.1f}×" if ratio >= 1 else f"1/{1 / ratio:.1f}",
        latency=fmt.duration(row["latency_per_launch_ns"]), measured=fmt.duration(row["measured_per_launch_ns"]))
    return fmt.plain(text)


def projection_section(study: WhatIf, lang: str) -> dict[str, Any]:
    """The what-if tables the main report's accelerator section shows (the run on its own device): calibration,
    what each design option buys, what latency goals need; in `lang`."""
    tables = _context(study, default_model(), None, Path("."), lang)["tables"]
    return {"calibration": tables["calibration"], "scenarios": tables["scenarios"],
            "requirements": tables["requirements"], "holds": calibration_holds(study.calibration),
            "bound_pct": 100 * CALIBRATION_BOUND, "carried": carried_phases(study.calibration),
            "max_carried_pct": MAX_CARRIED_PCT, "held_out": held_out(default_model())}




def _target_rows(source: Target, target: Target) -> list[dict[str, str]]:
    rows = [{"quantity": "bandwidth", "source": tbs(source.bandwidth), "target": tbs(target.bandwidth),
             "from": target.source.get("bandwidth", "")}]
    for precision in ("bf16", "fp16", "fp8", "int8", "fp4", "tf32", "fp32"):
        if source.flops.get(precision) or target.flops.get(precision):
            rows.append({"quantity": precision, "source": tflops(source.flops.get(precision)),
                         "target": tflops(target.flops.get(precision)), "from": target.source.get(precision, "")})
    rows.append({"quantity": "l2_bytes", "source": fmt.number((source.l2_bytes or 0) / 2**20, 0) + " MiB",
                 "target": fmt.number((target.l2_bytes or 0) / 2**20, 0) + " MiB",
                 "from": target.source.get("l2_bytes", "")})
    rows.append({"quantity": "sram_bytes", "source": "–", "target": f"{target.sram_bytes / 1e6:,.0f} MB",
                 "from": target.source.get("sram_bytes", "")})
    rows.append({"quantity": "latency_scale", "source": f"{source.latency_scale:.3f}",
                 "target": f"{target.latency_scale:.3f}", "from": target.source.get("latency_scale",
                                                                                   target.source.get("latency", ""))})
    return [r | {"from": r["from"] or "–"} for r in rows]


def _sweep_tables(s: WhatIf, h: dict[str, str], term: Callable[[Any], str]) -> dict[str, dict[str, str]]:
    dominant = dominant_groups(s.sweeps)
    out = {}
    if dominant.height == 0:
        return out
    for (parameter, phase), rows in dominant.group_by("parameter", "phase", maintain_order=True):
        unit, scale = (("TB/s", 1e12) if parameter in ("bandwidth", "onchip_bandwidth") else
                       ("MB", 1e6) if parameter in ("sram_bytes", "l2_bytes") else
                       ("", 1.0) if parameter == "latency_scale" else ("TFLOP/s", 1e12))
        out[f"{parameter}_{phase}"] = {"quantity": term(parameter), "phase": term(phase), "table": _table(rows, [
            (f"{term(parameter)} ({unit})" if unit else term(parameter), lambda r, scale=scale: f"{r['value'] / scale:,.2f}"),
            (h["projected"], lambda r: fmt.duration(r["total_ns"])),
            (h["dominant"], lambda r: ", ".join(f"{term(r[f'group_{i}'])} {r[f'pct_{i}']:.0f}%" for i in (1, 2)
                                                 if r.get(f"group_{i}")))], numeric_from=1, numeric_to=1)}
    return out


def _table(rows: pl.DataFrame | list[dict[str, Any]], columns: list[tuple[str, Cell]], numeric_from: int | None,
           numeric_to: int | None = None) -> str:
    """A GitHub Markdown table; columns numeric_from … numeric_to (default: the last) are right-aligned."""
    records = rows.iter_rows(named=True) if isinstance(rows, pl.DataFrame) else rows
    last = len(columns) - 1 if numeric_to is None else numeric_to
    right = [numeric_from is not None and numeric_from <= i <= last for i in range(len(columns))]
    cells = ([cell(r) for _, cell in columns] for r in records)
    return fmt.markdown_table([fmt.plain(t) for t, _ in columns], right, cells)


def _write_csvs(s: WhatIf, directory: Path) -> list[Path]:
    frames = {"calibration": s.calibration, "phases": s.phases, "groups": s.groups, "kernels": s.kernels,
              "scenarios": s.scenarios, "requirements": s.requirements, "sweeps": s.sweeps, "headline": s.headline}
    if s.parallel is not None:
        frames["parallel_phases"] = s.parallel.phases
        frames["parallel_collectives"] = s.parallel.collectives
        frames["parallel_links"] = pl.DataFrame([dataclasses.asdict(f) for f in s.parallel.fits])
    return write_csv_tables({name: df for name, df in frames.items() if df.width}, directory)  # no sweeps: none


def _key_figures(s: WhatIf, run_path: Path) -> dict[str, Any]:
    def target_dict(t: Target) -> dict[str, Any]:
        return {"name": t.name, "bandwidth": t.bandwidth, "flops": t.flops, "l2_bytes": t.l2_bytes,
                "sram_bytes": t.sram_bytes, "latency_scale": t.latency_scale, "source": t.source}

    return {
        "run": str(run_path), "source": target_dict(s.source), "target": target_dict(s.target),
        "options": {"fuse": s.options.fuse, "weight_bits": s.options.weight_bits},
        "calibration_holds": calibration_holds(s.calibration), "calibration_bound": CALIBRATION_BOUND,
        "carried_phases": carried_phases(s.calibration),
        # Relative width of the estimates' range (ln of estimate ÷ measured, RMS over held-out projections; 0 on the
        # measuring device, null where the model ships none).
        "estimate_spread": s.spread,
        "phases": {r["phase"]: {k: r[k] for k in ("steps", "measured_per_step_ns", "source_model_ns",
                                                  "target_model_ns", "estimate_ns", "estimate_low_ns",
                                                  "estimate_high_ns", "speedup", "calibration_ratio")}
                   for r in s.phases.iter_rows(named=True)},
        "timings": dataclasses.asdict(s.timings),
        # As is, the target's hardware alone, the options alone, both (whatif_headline.py).
        "headline": s.headline.to_dicts(),
        **({"parallel": _parallel_figures(s)} if s.parallel is not None else {}),
        **({"energy": energy_json(s.energy)} if s.energy is not None else {}),
    }


def _parallel_figures(s: WhatIf) -> dict[str, Any]:
    p = s.parallel
    return {"source_ranks": p.source_ranks, "target_ranks": p.target_ranks, "source_link": p.source_link,
            "target_link": p.target_link, "hop_latency_ns": p.hop_latency_ns,
            "links": [dataclasses.asdict(f) for f in p.fits],
            "phases": {r["phase"]: {k: v for k, v in r.items() if k != "phase"} for r in p.phases.iter_rows(named=True)}}
