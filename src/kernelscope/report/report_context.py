"""What the report's template is given in one language: the run (setup, timings and their spread, attribution and structure, replays), each phase's tables as Markdown, the measured, ranks and communication sections, the findings; and the report's Jinja environment of that language."""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import polars as pl
from jinja2 import Environment

from kernelscope.analyze.comparison import metrics
from kernelscope.analyze.costs.cost_coverage import costs_hint
from kernelscope.analyze.hardware import amd_architecture, classification_rule
from kernelscope.analyze.projection.accelerator import costs_cover
from kernelscope.analyze.report_tables import (
    ReportTables,
)
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.summary import Summary
from kernelscope.report import formatting as fmt
from kernelscope.report.critical_path import path_context
from kernelscope.report.energy_section import run_timeline, split_context
from kernelscope.report.tables_spec import SPECS, table_markdown
from kernelscope.report.templating import (
    message_catalog,
    template_environment,
    text_template,
)
from kernelscope.report.translations import descriptions
from kernelscope.report.trust import trust_context
from kernelscope.report.whatif import projection_section

STEP_ROWS = 40  # steps listed in the report; tables/steps.csv has them all


CONFIG_KEYS = [
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "max_position_embeddings", "tie_word_embeddings", "rms_norm_eps",
    "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
    "first_k_dense_replace", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
]


@functools.cache
def report_environment(lang: str, cpu_run: bool = False) -> Environment:
    """The report's environment in `lang` (one per process: its templates are compiled once)."""
    words = message_catalog("", lang)
    terms = words["terms"]
    headers = {**words["headers"], **(words["headers_cpu"] if cpu_run else {})}
    env = template_environment(words, dict(
        duration=fmt.duration, ms=fmt.ms, percent=fmt.percent, ratio=fmt.ratio_percent, number=fmt.number,
        joules=fmt.joules,
        gb=fmt.gigabytes, bytes=fmt.byte_amount, flop=fmt.flop_amount, code=fmt.code, text=fmt.markdown_text, term=lambda v: terms.get(v, v) if isinstance(v, str) else v,
        tb=lambda v: "–" if v is None else f"{v / 1e12:,.2f} TB/s",
        gbs=lambda v: "–" if v is None else f"{v / 1e9:,.1f} GB/s",
        tflops=lambda v: "–" if v is None else f"{v / 1e12:,.2f} TFLOP/s",
        header=lambda key: headers.get(key, key),
        # Upper-case the first letter only: terms such as "SAM encoder" or "CPU ops" keep their capitals.
        capitalize=lambda v: v[:1].upper() + v[1:] if isinstance(v, str) else v,
    ), cache_namespace=f"report-{lang}-{'cpu' if cpu_run else 'gpu'}")
    env.globals.update(layer_type_counts=_layer_type_counts)
    return env


def _layer_type_counts(model: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for label in (model.get("layer_types") or {}).values():
        counts[label] = counts.get(label, 0) + 1
    return counts


class _Tables:
    """Markdown tables in one language, by their spec in tables_spec.SPECS. On a CPU-only run some headers read
    differently (CPU ops for kernels); categories and descriptions are translated like terms."""

    def __init__(self, lang: str, cpu_run: bool = False) -> None:
        words = message_catalog("", lang)
        self.headers = {**words["headers"], **(words["headers_cpu"] if cpu_run else {})}
        self.terms = {**descriptions(lang), **words["terms"]}

    def __call__(self, name: str, df: pl.DataFrame | None, limit: int | None = None) -> str | None:
        if df is None:
            return None
        return table_markdown(df.head(limit) if limit else df, SPECS[name], self.headers, self.terms)


def page_context(run: Run, summary: Summary, tables: ReportTables, top_n: int, lang: str) -> dict[str, Any]:
    table = _Tables(lang, run.info.is_cpu)
    shown: set[str] = set()
    for t in tables.by_phase.values():
        shown |= set(t.kernels.head(top_n)["name"].to_list())
    acc = tables.accelerator
    return {
        **_run_context(run, summary, lang),
        **_phase_contexts(tables, table, top_n),
        "measured": _measured_context(tables, table, top_n),
        "phase_table": table("phases", tables.phases),
        # The phase table's optional columns this run fills (older runs lack the launch calls): the note under
        # the table explains those only.
        "phase_columns": [c for c in tables.phases.columns if tables.phases[c].is_not_null().any()],
        "energy": _energy_context(run, table),
        "idle_phases": table("idle_phases", tables.idle.per_phase if tables.idle is not None else None),
        "idle_gaps": table("idle_gaps", tables.idle.largest if tables.idle is not None else None),
        "communication": _communication_context(tables, table),
        "critical_path": path_context(tables.critical_path, table),
        "ranks": _ranks_context(tables, run.info, table),
        "ceilings": tables.ceilings,
        "missing_ceilings": tables.missing_ceilings,
        "rule": classification_rule(),
        "findings": (findings := _findings(tables, lang, run.info.is_cpu)),
        "bottlenecks": [f for f in findings if f["kind"] == "bottleneck"],
        "recommendations": [f for f in findings if f["recommend"]],
        "acc": acc,
        "acc_requirements": table("requirements", acc.requirements if acc else None),
        "acc_costs_cover": acc is not None and costs_cover(acc.decode_cost_coverage),
        "acc_fixed": table("mix", acc.fixed_function if acc is not None and acc.fixed_function.height else None),
        "acc_layers": table("weights", acc.weights_per_layer if acc is not None and acc.weights_per_layer.height else None),
        "projection": projection_section(tables.projection, lang) if tables.projection is not None else None,
        "unattributed": table("kernels", tables.unattributed, 10),
        "every_step": table("steps", tables.every_step, STEP_ROWS),
        "step_count": tables.every_step.height if tables.every_step is not None else 0,
        "source_lines": table("source_lines", tables.source_lines, top_n),
        "source_line_count": tables.source_lines.height if tables.source_lines is not None else 0,
        "attribution_levels": _attribution_levels(run),
        "attribution_absent": _attribution_absent(run),
        "structure": _structure(run),
        "replays": _replays(run),
        "costs_hint": costs_hint(tables.kernels, summary.cost_coverage, run.info),
        "appendix": table("names", tables.labels.filter(pl.col("name").is_in(sorted(shown)))),
        "images_table": _images_table(tables, table.headers, table.terms),
    }


def _attribution_levels(run: Run) -> list[dict[str, Any]]:
    """Per level of attribution: its source and coverage (run.json `attribution`), for the Attribution section."""
    info = run.info.attribution
    if info is None:
        return []
    # A level no evidence gave (source "none") is left out: the table lists what attribution found.
    return [{"level": level, "source": getattr(info, level).source, "coverage": getattr(info, level).coverage}
            for level in ("phase", "step", "module", "layer", "op", "source_line")
            if getattr(info, level).source not in (None, "none") and getattr(info, level).coverage]


def _structure(run: Run) -> list[dict[str, Any]]:
    """The levels of structure read from the trace's regularities, or left unknown with a reason, each with a
    message of the report's words (levels without one, from runs of other versions, are left out)."""
    info = run.info.attribution
    if info is None:
        return []
    return [{"level": s.level, "status": s.status, "code": s.code, "data": dict(s.values)}
            for s in info.structure if s.code and s.status in ("inferred", "unknown")]


def _attribution_absent(run: Run) -> list[str]:
    """Imported traces: the levels nothing in the trace gave (their table rows are left out), so that the report
    can say in one sentence what is missing and how a trace gets it."""
    info = run.info.attribution
    if info is None or run.info.source != "import":
        return []
    return [level for level in ("module", "layer", "source_line")
            if getattr(info, level).source in (None, "none") or not getattr(info, level).coverage]


def _replays(run: Run) -> dict[str, Any] | None:
    """Graph replays: their time, the share attributed per method, the reasons for the rest."""
    g = run.info.graph_replays
    if g is None or not g.replays:
        return None
    total = g.time_ns or 1
    return {"replays": g.replays, "kernels": g.kernels, "time_ns": g.time_ns, "captures": len(g.captures),
            "attributed_share": g.attributed_time_ns / total,
            "methods": [{"method": m.method, "replays": m.replays, "kernels": m.kernels, "share": m.time_ns / total}
                        for m in g.methods],
            "unattributed": [{**msgspec.structs.asdict(u), "share": u.time_ns / total} for u in g.unattributed]}


def _run_context(run: Run, summary: Summary, lang: str) -> dict[str, Any]:
    """What ran: the templates read the run's metadata as plain values (missing keys read as absent)."""
    info = run.info.to_dict()
    return {
        "lang": lang,
        "run": info,
        "summary": summary.to_dict(),
        "workload": info.get("workload") or {},
        "hardware": info["hardware"],
        # AMD GPUs: HIP's major.minor names an architecture (gfx94x), not a CUDA compute capability.
        "amd_architecture": amd_architecture(run.info.hardware.name, run.info.hardware.compute_capability,
                                             run.info.hardware.spec),
        "software": info["software"],
        "model": info.get("model") or {},
        "recognition": info.get("model_recognition") or {},
        "capture": info.get("capture") or {},
        "timings": info.get("timings") or {},
        "trace": info.get("trace") or {},
        "cpu_run": run.info.is_cpu,
        "unit": "CPU ops" if run.info.is_cpu else "kernels",
        "unit_one": "CPU op" if run.info.is_cpu else "kernel",  # (English says "1 kernel")
        "config_rows": _config_rows(run.info.model.language_config() if run.info.model is not None else {}),
        **_timing_spread(run, lang),
        **trust_context(summary, lang),
    }


def _energy_context(run: Run, table: _Tables) -> dict[str, Any] | None:
    """profile --energy's phases as a table (tokens only where a phase has them), the record for the words, the
    phases whose windows are shorter than an update of the counter (their joules are interpolated), the split by
    class of kernels and why the power figure is missing where it is."""
    energy = run.info.energy
    if energy is None or not energy.phases:
        return None
    # Per token only from the stages (the words above): a short window's interpolated share is no measurement.
    rows = pl.DataFrame([{"phase": p.phase, "time_ns": p.seconds * 1e9, "tokens": p.tokens or None,
                          "joules": p.joules, "mean_watts": p.mean_watts, "joules_from_power": p.joules_from_power}
                         for p in energy.phases],
                        schema={"phase": pl.String, "time_ns": pl.Float64, "tokens": pl.Int64, "joules": pl.Float64,
                                "mean_watts": pl.Float64, "joules_from_power": pl.Float64})
    update = energy.counter_update_ms
    short = [p.phase for p in energy.phases if update and p.mean_window_ms is not None and p.mean_window_ms < update]
    return {"table": table("energy", rows), "info": msgspec.to_builtins(energy),
            "short": short, "split": split_context(run), "no_figure": run_timeline(run)[1]}


def _timing_spread(run: Run, lang: str) -> dict[str, Any]:
    """The spread of the unprofiled timings over their repeats (a table when some metric has two values or
    more), and the verdict on the ranges' effect on the end-to-end time (analyze/comparison/metrics.py: the one rule)."""
    timings = run.info.timings
    if timings is None:
        return {"spread_table": None, "overhead": None, "e2e_spread": None}
    words = message_catalog("", lang)
    headers = words["headers"]
    rows = []
    estimates = {}
    for mode, summary in (("plain", timings.plain), ("annotated", timings.annotated)):
        for metric, key, values in (("ttft", metrics.TTFT, summary.ttft_ms_all),
                                    ("tpot", metrics.TPOT, summary.tpot_ms_all),
                                    ("e2e", metrics.E2E, summary.e2e_ms_all)):
            e = metrics.estimate(key, values)
            estimates[(mode, metric)] = e
            if e.n >= 2:
                rows.append({"mode": words["text"][f"mode_{mode}"], "metric": headers[metric], "n": e.n,
                             "min": e.min, "median": e.value, "max": e.max,
                             "cv": None if e.cv is None else 100 * e.cv})
    table = None
    if rows:
        spec = [("mode", "mode", "text"), ("metric", "metric", "text"), ("runs", "n", "int"), ("min", "min", "ms3"),
                ("med", "median", "ms3"), ("max", "max", "ms3"), ("cv", "cv", "pct")]
        table = table_markdown(pl.DataFrame(rows), spec, headers, words["terms"])
    plain, annotated = estimates[("plain", "e2e")], estimates[("annotated", "e2e")]
    overhead = metrics.judge(plain, annotated) if plain.n >= 2 and annotated.n >= 2 else None
    return {"spread_table": table,
            "overhead": None if overhead is None else {"within_noise": overhead.status == metrics.SAME,
                                                       "threshold_pct": 100 * overhead.threshold},
            "e2e_spread": {"plain": plain, "annotated": annotated}}


def _phase_contexts(tables: ReportTables, table: _Tables, top_n: int) -> dict[str, Any]:
    """Per phase: kernel tables, layer breakdowns, roofline tables, cost coverage."""
    kernel_tables = {}
    for phase, t in tables.by_phase.items():
        rest = t.kernels.slice(top_n)
        kernel_tables[phase] = {
            "table": table("kernels", t.kernels, top_n),
            "shown": min(top_n, t.kernels.height),
            "total": t.kernels.height,
            "rest_pct": float(rest["time_pct"].sum()) if rest.height else 0.0,
            "mix": table("mix", t.categories),
            # Without ceilings no kernel has a class: the column would hold only "unclassified".
            "longest": table("longest", t.longest if tables.ceilings else t.longest.drop("roofline_class", strict=False)),
            "coverage": t.catalog_coverage,
            "unknown": table("unknown", t.unknown_kernels),
            "op_groups": table("op_groups", t.op_groups, top_n) if t.op_groups is not None and t.op_groups.height else None,
        }
    breakdowns = {
        phase: {"types": table("layer_types", t.layer_types), "modules": table("breakdown", t.layer_breakdown),
                "per_layer": table("per_layer", t.per_layer) if t.per_layer is not None and t.per_layer.height else None}
        for phase, t in tables.by_phase.items() if t.layer_breakdown is not None
    }
    roofline = {
        phase: {"classes": table("classes", t.classes), "kernels": table("roofline", t.roofline_kernels, top_n),
                "above": _above_roof(t.roofline_kernels.head(top_n)) if t.roofline_kernels is not None else None,
                "covered": t.cost_coverage}
        for phase, t in tables.by_phase.items() if t.classes is not None
    }
    # Without ceilings no GEMM has a roof or a class: those columns would hold only "–" and "unclassified".
    no_roof = ("roof_pct", "roofline_class")
    gemms = {phase: {"table": table("gemm_shapes", t.gemm_shapes if tables.ceilings else t.gemm_shapes.drop(no_roof),
                                    top_n), "shown": min(top_n, t.gemm_shapes.height),
                     "total": t.gemm_shapes.height, "time_pct": float(t.gemm_shapes["time_pct"].sum())}
             for phase, t in tables.by_phase.items() if t.gemm_shapes is not None}
    return {"kernel_tables": kernel_tables, "breakdowns": breakdowns, "roofline": roofline, "gemm_shapes": gemms,
            "op_group_phases": [phase for phase, t in kernel_tables.items() if t["op_groups"]],
            "cost_coverage": {phase: t.cost_coverage for phase, t in tables.by_phase.items()},
            "cost_sources": {phase: t.cost_sources for phase, t in tables.by_phase.items()}}


def _above_roof(kernels: pl.DataFrame) -> dict[str, Any] | None:
    """The kernels of a roofline table whose analytic rate passes a roof (over 100%), for the sentence that
    explains the mark: how many pass the bandwidth roof and the compute roof, and the highest share."""
    memory = kernels.filter(pl.col("memory_roof_pct").cast(pl.Float64) > 100)
    compute = kernels.filter(pl.col("compute_roof_pct").cast(pl.Float64) > 100)
    if not memory.height and not compute.height:
        return None
    return {"memory": memory.height, "compute": compute.height,
            "highest": float(max(memory["memory_roof_pct"].max() or 0, compute["compute_roof_pct"].max() or 0))}


def _measured_context(tables: ReportTables, table: _Tables, top_n: int) -> dict[str, Any] | None:
    m = tables.measured
    if m is None:
        return None
    return {
        "phase": m.phase,
        "count": m.kernels.height,
        "classes": table("measured_classes", m.classes),
        "kernels": table("measured_kernels", m.kernels, top_n),
        "accuracy": table("accuracy", m.analytic_vs_measured, top_n),
    }


def _config_rows(config: dict[str, Any]) -> list[tuple[str, Any]]:
    """The language model's shape from its config."""
    return [(k, config.get(k)) for k in CONFIG_KEYS if config.get(k) is not None]


def _images_table(tables: ReportTables, headers: dict[str, str], terms: dict[str, str]) -> str | None:
    """Per image of a run with one generation per image: one device-time column per phase, named by the phase."""
    df = tables.generations
    if df is None:
        return None
    fixed = {"generation", "source", "size", "crops", "prompt_tokens", "device_time_ns", "ttft_ms", "e2e_ms"}
    phases = [c for c in df.columns if c not in fixed]
    spec = [("image", "generation", "int"), ("source", "source", "term"), ("size", "size", "text"),
            ("crops", "crops", "num1"), ("prompt_tokens", "prompt_tokens", "int"),
            *((phase, phase, "dur") for phase in phases), ("device_total", "device_time_ns", "dur"),
            ("ttft", "ttft_ms", "ms"), ("e2e", "e2e_ms", "ms")]
    titles = {**headers, **{phase: terms.get(phase, phase) for phase in phases}}
    return table_markdown(df, spec, titles, terms)


def _findings(tables: ReportTables, lang: str, cpu_run: bool = False) -> list[dict[str, Any]]:
    """Each finding with its text and recommendation in `lang`, numbered F1, F2, … in rule order."""
    env = report_environment(lang)
    time_word = message_catalog("", lang)["terms"]["cpu_time" if cpu_run else "device_time"]
    out = []
    for number, finding in enumerate(tables.findings, start=1):
        values = {name: metric.value for name, metric in finding.numbers.items()}
        values["device_time"] = fmt.Markdown(time_word)
        # Rendered by the page's environment, which escapes the values (input names): the result is Markdown of
        # ours and must not be escaped a second time where the template prints it.
        text = fmt.Markdown(text_template(env, f"finding:{finding.id}", finding.rule[lang]).render(**values))
        recommend = finding.rule.get(f"recommend_{lang}")
        out.append({"id": f"F{number}", "rule": finding.id, "kind": finding.kind, "text": text,
                    "recommend": fmt.Markdown(text_template(env, f"recommend:{finding.id}", recommend).render(**values))
                    if recommend else None})
    return out


def _ranks_context(tables: ReportTables, info: RunInfo, table: _Tables) -> dict[str, Any] | None:
    parallel = info.parallel
    if tables.ranks is None:
        # The report of one rank of a run of several (`report --rank K`).
        if parallel is not None and len(parallel.ranks) == 1 and parallel.world_size > 1:
            return {"single": parallel.ranks[0].rank, "count": parallel.world_size}
        return None
    return {"table": table("ranks", tables.ranks), "count": tables.ranks.height,
            "tp": parallel.tensor_parallel if parallel is not None else 1,
            "ep": parallel.expert_parallel if parallel is not None else 1,
            "backend": parallel.backend if parallel is not None else None,
            "timed": parallel is not None and bool(parallel.ranks),
            "working": "working_ns" in tables.ranks.columns}


def _communication_context(tables: ReportTables, table: _Tables) -> dict[str, Any] | None:
    comm = tables.communication
    if comm is None:
        return None
    worst = None
    if comm.by_rank["wait_ns"].drop_nulls().len():
        worst = comm.by_rank.sort(["wait_ns", "phase", "rank"], descending=[True, False, False], nulls_last=True).row(
            0, named=True)
    layers = comm.by_layer
    return {"collectives": table("communication", comm.by_collective) if comm.by_collective.height else None,
            "layers": table("communication_layers", layers) if layers is not None and layers.height else None,
            "ranks": table("communication_ranks", comm.by_rank), "ranks_n": comm.ranks, "unmatched": comm.unmatched,
            "link": comm.link, "link_peak": comm.link_peak, "worst": worst,
            "matched": comm.instances.height}
