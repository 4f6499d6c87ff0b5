"""The verdict of `kernelscope check` as short GitHub Markdown, fit for a pull-request comment: the result, what
was compared and the threshold each figure was held to, and for a phase that grew, which kernels and layers added
the time. Names come from traces: they are escaped (report/formatting.py)."""

from __future__ import annotations

from kernelscope.analyze.comparison.regression import Check, Culprit, Verdicts
from kernelscope.report.formatting import code, duration, markdown_table, markdown_text

MAX_NAME = 90  # characters of a kernel name in the summary


def render_verdict(verdict: Verdicts, candidate: str, baseline: str, differences: list[str] | None = None) -> str:
    regressed = [c for c in verdict.checks if c.regressed]
    title = "regression" if regressed else "pass"
    rule = (f"every figure held to --max-slowdown {verdict.max_slowdown:.1%}" if verdict.max_slowdown is not None
            else "each figure held to max(3% floor, the noise of its own repeats in either run) (docs/compare.md, "
                 "\"Noise\")")
    lines = [f"## kernelscope check: {title}", ""]
    if differences:  # asked for with --allow-incomparable: said before any number
        lines += [f"**Not like for like:** {markdown_text('; '.join(differences))}.", ""]
    lines += [f"Candidate {code(candidate)} against baseline {code(baseline)}; {rule}.", ""]
    if regressed:
        lines += [f"**{len(regressed)} figure{'s' if len(regressed) > 1 else ''} regressed:** "
                  + "; ".join(_short(c) for c in regressed) + ".", ""]
    else:
        lines += ["No figure got slower than its threshold.", ""]
    lines += [markdown_table(["figure", "baseline", "candidate", "change", "threshold", "verdict"],
                             [False, True, True, True, True, False],
                             [_row(c) for c in verdict.checks]), ""]
    if verdict.kernels:
        lines += ["### Kernels that added the most time per step", "",
                  markdown_table(["phase", "kernel", "baseline", "candidate", "added", "layers (added)"],
                                 [False, False, True, True, True, False],
                                 [_culprit_row(c, name=True) for c in verdict.kernels]), ""]
    if verdict.layers:
        lines += ["### Layers that added the most time per step", "",
                  markdown_table(["phase", "layer", "baseline", "candidate", "added", "modules (added)"],
                                 [False, True, True, True, True, False],
                                 [_culprit_row(c, name=False) for c in verdict.layers]), ""]
    if verdict.notes:
        lines += ["Notes:", "", *(f"- {markdown_text(note)}" for note in verdict.notes), ""]
    return "\n".join(lines)


def _label(check: Check) -> str:
    """What was compared, with its statistic (metrics: TPOT and TTFT are medians of the timed runs, times per step
    means over the steps)."""
    if check.subject is not None:
        return f"{markdown_text(check.phase)} kernel {code(_cut(check.subject))} (mean per step)"
    if check.phase is not None:
        return f"{markdown_text(check.phase)} {check.metric}"
    return f"{check.metric} ({check.verdict.metric.statistic})"


def _value(check: Check, value: float) -> str:
    return duration(value) if check.unit == "ns" else f"{value:,.3f} ms"


def _row(check: Check) -> list[str]:
    verdict = "**regressed**" if check.regressed else "improved" if check.improved else "ok"
    return [_label(check), _value(check, check.baseline), _value(check, check.candidate), f"{check.change:+.1%}",
            _threshold(check), verdict]


def _threshold(check: Check) -> str:
    """The threshold, and where the floor alone applied because neither run's noise is known."""
    floor_only = not check.verdict.noise_known and not check.verdict.fixed
    return f"{check.threshold:.1%}" + (" (floor; noise unknown)" if floor_only else "")


def _short(check: Check) -> str:
    return f"{_label(check)} {check.change:+.1%} (threshold {check.threshold:.1%})"


def _culprit_row(culprit: Culprit, name: bool) -> list[str]:
    subject = code(_cut(culprit.subject)) if name else markdown_text(culprit.subject)
    where = ", ".join(f"{code(_cut_module(w, 60)) if not name else markdown_text(w)} (+{duration(added)})"
                      for w, added in culprit.where) or "–"
    if culprit.places > len(culprit.where):
        where += f" … ({culprit.places} {'layers' if name else 'modules'} in all)"
    return [markdown_text(culprit.phase), subject, duration(culprit.baseline_ns), duration(culprit.candidate_ns),
            f"{'+' if culprit.added_ns >= 0 else ''}{duration(culprit.added_ns)}", where]


def _cut(text: str, limit: int = MAX_NAME) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cut_module(path: str, limit: int) -> str:
    """A module's qualified name within `limit` characters, keeping its end: the modules of one layer share their
    beginning (`Model.Encoder.Layer.0.`) and differ at the end. Whole dotted parts are kept where they fit."""
    if len(path) <= limit:
        return path
    tail = path[-(limit - 1):]
    dot = tail.find(".")
    return "…" + (tail[dot + 1:] if 0 <= dot < len(tail) - 1 else tail)
