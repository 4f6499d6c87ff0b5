"""The drawing functions, by name: a figure helper (figure_jobs) draws a job by the name of its function here, and
report, compare and what-if pages call them from here. Each family lives in its own module: roofline charts
(roofline_figures), histograms (histogram_figures), a comparison's and a what-if's charts (study_figures), the
critical path's bars (path_figure); what they share in figure_base. Loading this module loads matplotlib."""

from __future__ import annotations

from kernelscope.report.energy_figure import power_timeline_chart, power_timeline_chart_versions
from kernelscope.report.figure_base import Version, cjk_font, literal, place_labels, short_label
from kernelscope.report.histogram_figures import (
    binned_histograms,
    binned_histograms_versions,
    histograms,
    measured_histograms,
    measured_histograms_versions,
)
from kernelscope.report.path_figure import critical_path_bars
from kernelscope.report.roofline_figures import (
    measured_roofline,
    measured_roofline_versions,
    per_kernel_rooflines,
    per_kernel_rooflines_versions,
    roofline_normalized,
    roofline_normalized_versions,
    roofline_physical,
    roofline_physical_versions,
)
from kernelscope.report.study_figures import compare_bars, sweep_chart

__all__ = [
    "VERSIONED", "Version", "binned_histograms", "cjk_font", "compare_bars", "critical_path_bars", "histograms",
    "literal", "measured_histograms", "power_timeline_chart", "measured_roofline", "per_kernel_rooflines", "place_labels",
    "roofline_normalized", "roofline_physical", "short_label", "sweep_chart",
]

# Figures drawn once for several languages (figure_jobs; their names in figure_jobs.VERSIONED): each function's
# name to its form that takes versions. Their arguments end with title, directory and stem, then the words.
VERSIONED = {"binned_histograms": binned_histograms_versions, "measured_histograms": measured_histograms_versions,
             "roofline_physical": roofline_physical_versions, "roofline_normalized": roofline_normalized_versions,
             "per_kernel_rooflines": per_kernel_rooflines_versions, "measured_roofline": measured_roofline_versions,
             "power_timeline_chart": power_timeline_chart_versions}
