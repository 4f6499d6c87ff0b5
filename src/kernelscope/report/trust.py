"""What the report says first about whether its numbers can be trusted: the noisy-run banner (summary.json
`noise`) and the integrity audit's section (summary.json `integrity`), as template values."""

from __future__ import annotations

from typing import Any

import msgspec

from kernelscope.analyze.comparison import metrics
from kernelscope.contracts.summary import Summary
from kernelscope.report import formatting as fmt
from kernelscope.report.templating import message_catalog


def trust_context(summary: Summary, lang: str) -> dict[str, Any]:
    return {
        "noisy": noisy_metrics(summary, lang),
        # The integrity audit (summary.json `integrity`), every check in the order it is listed.
        "integrity": None if isinstance(summary.integrity, msgspec.UnsetType) else msgspec.to_builtins(summary.integrity),
        "integrity_checks": INTEGRITY_CHECKS,
    }


# The integrity audit's rows in the report (analyze/integrity.COUNTS, with what the flows were checked against).
INTEGRITY_CHECKS = ("stream_overlaps", "outside_window", "launches_without_kernel", "kernels_without_launch",
                    "flows_unpaired", "clock_jumps", "devices_silent", "unclosed_files", "trailing_bytes",
                    "dropped_events")


# summary.json `noise.metrics` keys → the report's words for them ([headers]) and how their values print. The
# rates (tokens/s) are the inverses of these times and vary with them: the banner names the times.
_NOISE_WORDS = {"ttft_ms": ("ttft", "ms"), "tpot_ms": ("tpot", "ms"), "e2e_ms": ("e2e", "ms"),
                metrics.DECODE_STEP_KEY: ("decode_step", "us")}


def noisy_metrics(summary: Summary, lang: str) -> dict[str, Any] | None:
    """A noisy run's banner (summary.json `noise`): the metrics that vary beyond the limit, with their range and
    coefficient of variation, and the largest threshold a comparison would hold a change to."""
    noise = summary.noise
    if isinstance(noise, msgspec.UnsetType) or not any(m.noisy for k, m in noise.metrics.items() if k in _NOISE_WORDS):
        return None
    headers = message_catalog("", lang)["headers"]
    shown = []
    for key, m in noise.metrics.items():
        if not m.noisy or key not in _NOISE_WORDS:
            continue
        word, kind = _NOISE_WORDS[key]
        value = (lambda v: fmt.duration(v * 1e3)) if kind == "us" else fmt.ms
        shown.append({"name": headers[word], "n": m.repeats, "min": value(m.min), "max": value(m.max),
                      "cv": m.cv_pct, "statistic": m.statistic})
    allowances = [m.allowance_pct for key, m in noise.metrics.items()
                  if m.noisy and m.allowance_pct is not None and key in _NOISE_WORDS]
    return {"metrics": shown, "limit": noise.noisy_cv_pct,
            "threshold": max([metrics.floor() * 100, *allowances])}
