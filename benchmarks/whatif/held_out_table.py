"""Summaries of benchmarks/whatif/held_out.py's projections: mean absolute error per variant, phase and kind of work,
the spread of the log ratios (the uncertainty the model ships), and the Markdown table of docs/whatif.md."""

from __future__ import annotations

import math
from collections import defaultdict

ALL = "*"
PHASES = ("prefill", "decode", "unknown")


def _mae(values: list[float]) -> float:
    return sum(abs(v) for v in values) / len(values)


def _rms(values: list[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values))


def summarise(rows: list[dict]) -> dict:
    """Per variant: per phase (the phase's total) and per kind of work, how many projections, their mean absolute
    error, the largest, and the RMS of ln(estimate ÷ measured); the phases also split by same vendor and
    cross-vendor."""
    out: dict = {}
    by: dict = defaultdict(list)
    for r in rows:
        v = r["variant"]
        if r["group"] == ALL:
            by[(v, "phase", r["phase"])].append(r)
            by[(v, "phase", "all")].append(r)
            by[(v, "kind", r["kind"])].append(r)
        else:
            by[(v, "group", r["group"])].append(r)
    for (variant, axis, key), items in sorted(by.items()):
        errors = [r["error"] for r in items]
        worst = max(items, key=lambda r: abs(r["error"]))
        out.setdefault(variant, {}).setdefault(axis, {})[key] = {
            "projections": len(items), "mae": round(_mae(errors), 4),
            "max_abs_error": round(abs(worst["error"]), 4),
            "worst": f"{worst['pair']}: {worst['source']} → {worst['target']}, {worst['phase']}",
            "log_rms": round(_rms([r["log_ratio"] for r in items]), 4)}
    return out


def uncertainty(rows: list[dict], variant: str = "after") -> dict[str, dict[str, float]]:
    """The ranges the model ships (data/projection.toml [uncertainty]): per kind of work and per phase (`*`), the
    RMS of ln(estimate ÷ measured) of the held-out projections, for a target of the source's family (`same`) and of
    another family (`other`)."""
    spread: dict = defaultdict(list)
    for r in rows:
        if r["variant"] != variant:
            continue
        case = "same" if r["kind"] == "same vendor" else "other"
        spread[(case, r["group"])].append(r["log_ratio"])
    table: dict[str, dict[str, float]] = {}
    for (case, group), values in sorted(spread.items()):
        table.setdefault(case, {})[group] = round(_rms(values), 4)
    return table


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def markdown_table(result: dict) -> str:
    s = result["summary"]
    variants = ["unchanged", "before", "after", *(v for v in s if v not in ("unchanged", "before", "after"))]
    names = {"unchanged": "time unchanged", "before": "shipped before", "after": "**now**"}
    record = result.get("record") or f"whatif-held-out-{result['date']}.json"
    lines = [f"Held-out projections, {result['date']} ([{record}](../benchmarks/results/{record})): "
             "mean absolute error of the estimate's device time per step against the other device's measurement "
             "(largest in brackets).", "",
             "| | projections | " + " | ".join(names.get(v, v) for v in variants) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in variants) + " |"]
    keys = [("phase", p) for p in (*PHASES, "all")] + [("kind", k) for k in ("same vendor", "cross-vendor")]
    labels = {"unknown": "one forward pass", "all": "**all phases**", "same vendor": "H200 ↔ H100",
              "cross-vendor": "H100 ↔ MI300X"}
    for axis, key in keys:
        cells = [s[v].get(axis, {}).get(key) for v in variants]
        if not any(cells):
            continue
        count = next(c["projections"] for c in cells if c)
        lines.append(f"| {labels.get(key, key)} | {count} | " + " | ".join(
            f"{_pct(c['mae'])} ({_pct(c['max_abs_error'])})" if c else "–" for c in cells) + " |")
    lines += ["", "Per kind of work (where it is at least "
              f"{100 * result['min_share']:.0f}% of its phase on the measured device):", "",
              "| kind of work | projections | " + " | ".join(names.get(v, v) for v in variants) + " |",
              "| --- | ---: | " + " | ".join("---:" for _ in variants) + " |"]
    groups = sorted({g for v in variants for g in s[v].get("group", {})})
    for g in groups:
        cells = [s[v].get("group", {}).get(g) for v in variants]
        count = next(c["projections"] for c in cells if c)
        lines.append(f"| {g} | {count} | " + " | ".join(
            f"{_pct(c['mae'])} ({_pct(c['max_abs_error'])})" if c else "–" for c in cells) + " |")
    return "\n".join(lines) + "\n"
