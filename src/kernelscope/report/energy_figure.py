"""The Energy section's figure: board power over the energy pass, the counter's mean power between its updates,
the stages and the prefill and decode windows, on one clock (drawing only; analyze/energy_timeline decimates).
Drawn by name from figures.py in a figure helper, once for every language (save_versions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kernelscope.analyze.energy_timeline import PowerTimeline
from kernelscope.contracts.energy_tables import DECODE, PREFILL
from kernelscope.report.figure_base import PALETTE, Version, literal, one_version, plt, save_versions

# The windows shaded behind the lines: prefill orange, decode blue; the stages as a strip underneath.
SHADES = {PREFILL: PALETTE[1], DECODE: PALETTE[0]}
STAGE_COLORS = (PALETTE[7], PALETTE[4])


def power_timeline_chart(timeline: PowerTimeline, title: str, directory: Path, stem: str,
                         words: dict | None = None) -> list[Path]:
    return power_timeline_chart_versions(timeline, one_version(title, directory, stem, words))[0]


def power_timeline_chart_versions(timeline: PowerTimeline, versions: list[Version]) -> list[list[Path]]:
    fig, (ax, strip) = plt.subplots(2, 1, figsize=(8.0, 3.9), sharex=True,
                                    gridspec_kw={"height_ratios": [6, 1], "hspace": 0.08})
    shaded = {}
    for phase, spans in timeline.spans.items():
        if spans:
            shaded[phase] = ax.broken_barh(spans, (0, 1), transform=ax.get_xaxis_transform(),
                                           color=SHADES.get(phase, PALETTE[2]), alpha=0.15, linewidth=0)
    band = ax.fill_between(timeline.bin_s, timeline.low_w, timeline.high_w, color=PALETTE[3], alpha=0.25,
                           linewidth=0, step="mid")
    (power,) = ax.plot(timeline.bin_s, timeline.mean_w, color=PALETTE[3], linewidth=0.9, drawstyle="steps-mid")
    counter = None
    if len(timeline.update_w):
        # Each interval's mean power held from one update to the next; the updates marked on the line.
        edges = np.repeat(timeline.update_s, 2)[1:-1]
        levels = np.repeat(timeline.update_w, 2)
        (counter,) = ax.plot(edges, levels, color="black", linewidth=1.0)
        ax.plot(timeline.update_s[1:], timeline.update_w, linestyle="none", marker="|", markersize=5,
                color="black")
    top = max(float(np.nanmax(timeline.high_w)), float(np.nanmax(timeline.update_w)) if counter else 0.0)
    ax.set_ylim(0, top * 1.4 if top > 0 else 1.0)  # room for the legend above the highest line
    ax.set_xlim(0, timeline.end_s)
    ax.grid(axis="y", linewidth=0.4, alpha=0.5)
    for index, (_, start, end) in enumerate(timeline.stages):
        strip.broken_barh([(start, end - start)], (0.15, 0.7), color=STAGE_COLORS[index % 2], alpha=0.6)
    strip.set_ylim(0, 1)
    strip.set_yticks([])
    stage_labels = [strip.text((start + end) / 2, 0.5, "", ha="center", va="center", fontsize=7.5)
                    for _, start, end in timeline.stages]

    def label(version: Version) -> None:
        w = version.words
        ax.set_title(literal(version.title))
        ax.set_ylabel(w["power_axis"])
        strip.set_xlabel(w["power_time_axis"])
        for text, (name, _, _) in zip(stage_labels, timeline.stages, strict=True):
            text.set_text(literal(w["terms"].get(name, name)))
        handles = [power, band, *([counter] if counter else []), *shaded.values()]
        names = [w["power_samples"], w["power_band"], *([w["power_counter"]] if counter else []),
                 *(w["power_window"].format(phase=w["terms"].get(p, p)) for p in shaded)]
        ax.legend(handles, names, loc="upper right", ncols=2, frameon=False)

    fig.subplots_adjust(left=0.09, right=0.98, top=0.9, bottom=0.13)
    return save_versions(fig, versions, label)
