"""What the figures read besides their data: the words of each language and the kernel columns the histograms
show. Kept apart from figures.py so that the process that plans a report's figures (and hands them to helper
processes) never loads matplotlib."""

from __future__ import annotations

from typing import Any

from kernelscope.report.templating import message_catalog

# (kernel column, scale to the axis' unit, logarithmic bins when the values span more than 20×)
HISTOGRAMS = [
    ("dur_ns", 1e-3, True),
    ("compute_roof_pct", 1.0, False),
    ("memory_roof_pct", 1.0, False),
    ("arithmetic_intensity", 1.0, True),
    ("est_occupancy_pct", 1.0, False),
    ("registers_per_thread", 1.0, False),
    ("blocks", 1.0, True),
    ("threads_per_block", 1.0, False),
]
_LAUNCH_SHAPE = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]


def words_for(lang: str = "en") -> dict[str, Any]:
    """The words figures draw in `lang` (messages/<lang>.toml [figures]), with the report's terms under "terms"."""
    catalog = message_catalog("", lang)
    return {**catalog["figures"], "terms": catalog["terms"]}


def histogram_columns() -> list[str]:
    """The kernel columns the histograms read (only these travel to a helper process)."""
    return [column for column, *_ in HISTOGRAMS] + _LAUNCH_SHAPE + ["instances", "phase"]
