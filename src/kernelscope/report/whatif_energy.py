"""The what-if's energy per token (docs/whatif.md, "Energy"): its whatif.json entry and its Markdown table; the words
are in messages/whatif.<lang>.toml (energy_*)."""

from __future__ import annotations

import dataclasses
from typing import Any

from kernelscope.analyze.projection.energy_projection import EnergyEstimate, EnergyTerms
from kernelscope.report import formatting as fmt
from kernelscope.report.templating import message_catalog

ESTIMATED = "estimated"


def _terms(terms: EnergyTerms) -> dict[str, Any]:
    return {"pj_per_flop": terms.pj_per_flop, "pj_per_byte": terms.pj_per_byte, "static_watts": terms.static_watts,
            "source": terms.source}


def _estimate(e: EnergyEstimate) -> dict[str, Any]:
    return {**dataclasses.asdict(e), "joules": e.joules}


def energy_json(energy: Any) -> dict[str, Any] | None:
    """whatif.json `energy`: the terms, and per phase the estimates on both devices and the calibration."""
    if energy is None:
        return None
    if energy.projection is None:
        return {"status": "no terms", "missing": energy.missing, "measured": energy.measured}
    p = energy.projection
    return {"status": ESTIMATED, "measured": energy.measured, "source_terms": _terms(p.source_terms),
            "target_terms": _terms(p.target_terms), "source_terms_from_target": p.source_terms_from_target,
            "phases": {row.phase: {"tokens_per_step": row.tokens_per_step, "flops_per_step": row.flops_per_step,
                                   "bytes_per_step": row.bytes_per_step, "host_ns": row.host_ns,
                                   "source": _estimate(row.source), "target": _estimate(row.target),
                                   "measured_joules_per_token": row.measured_joules_per_token,
                                   "calibration_ratio": row.calibration_ratio}
                       for row in p.phases}}


def energy_context(energy: Any, lang: str, term) -> dict[str, Any] | None:
    """What the template's Energy section needs: the table (per phase: tokens per step, time, static and dynamic
    joules per step on the target, joules per token on the measuring device, measured, their ratio, and on the
    target) and the terms."""
    if energy is None:
        return None
    if energy.projection is None:
        return {"missing": energy.missing, "measured": energy.measured}
    h = message_catalog("whatif", lang)["headers"]
    p = energy.projection
    head = [h["phase"], h["energy_tokens"], h["energy_time"], h["energy_static"], h["energy_dynamic"],
            h["energy_source"], h["energy_measured"], h["energy_ratio"], h["energy_target"]]
    rows = [[term(r.phase), fmt.number(r.tokens_per_step), fmt.duration(r.target.time_ns),
             fmt.joules(r.target.static_joules), fmt.joules(r.target.dynamic_joules),
             fmt.joules(r.source.joules_per_token), fmt.joules(r.measured_joules_per_token),
             fmt.ratio_percent(r.calibration_ratio, 1), fmt.joules(r.target.joules_per_token)] for r in p.phases]
    table = fmt.markdown_table([fmt.plain(t) for t in head], [False] + [True] * (len(head) - 1), rows)
    unpriced = any(r.target.unpriced_flops or r.source.unpriced_flops for r in p.phases)
    return {"table": table, "source_terms": terms_text(p.source_terms, term), "target_terms": terms_text(p.target_terms, term),
            "from_target": p.source_terms_from_target, "measured": energy.measured, "unpriced": unpriced,
            "host": any(r.host_ns is not None for r in p.phases)}


def terms_text(terms: EnergyTerms, term) -> fmt.Markdown:
    """The terms in one line, each with where it came from (escaped: a spec file's name is the user's text)."""
    flops = ", ".join(f"{term(k)} {v:g}" for k, v in sorted(terms.pj_per_flop.items()))
    source = terms.source
    return fmt.Markdown(f"{flops} pJ/FLOP ({fmt.plain(source.get('pj_per_flop', '–'))}); "
                        f"{terms.pj_per_byte:g} pJ/B ({fmt.plain(source.get('pj_per_byte', '–'))}); "
                        f"{terms.static_watts:g} W ({fmt.plain(source.get('static_watts', '–'))})")
