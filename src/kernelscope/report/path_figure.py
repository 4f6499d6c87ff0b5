"""The critical-path figure: per phase, the mean step's path split into its classes (drawing only; the numbers come
from analyze/paths/critical_path). Drawn by name from figures.py in a figure helper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from kernelscope.analyze.paths.path_walk import CLASSES  # noqa: E402
from kernelscope.report import figure_formats, figure_versions  # noqa: E402
from kernelscope.report.figure_inputs import words_for  # noqa: E402

# One colour per class, the same in every report: device work blue and purple, waiting grey, the host orange.
COLORS = {"compute": "#4c72b0", "communication": "#8172b2", "wait": "#9a9a9a", "launch": "#dd8452",
          "host": "#c44e52"}


def critical_path_bars(rows: list[tuple[str, int, list[float]]], directory: Path, stem: str,
                       words: dict[str, Any] | None = None) -> list[Path]:
    """rows: per phase its name, steps and the mean step's path time per class (ms, CLASSES order)."""
    words = words or words_for()
    terms = words["terms"]
    fig, ax = plt.subplots(figsize=(7.5, 1.3 + 0.55 * len(rows)))
    labels = [words["path_phase"].format(phase=terms.get(phase, phase), steps=steps) for phase, steps, _ in rows]
    left = [0.0] * len(rows)
    for index, name in enumerate(CLASSES):
        widths = [values[index] for _, _, values in rows]
        ax.barh(labels, widths, left=left, color=COLORS[name], label=terms.get(name, name), height=0.6)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set_xlabel(words["path_axis"])
    ax.set_title(words["path_title"], pad=24)
    ax.legend(ncols=len(CLASSES), loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.tight_layout()
    directory.mkdir(parents=True, exist_ok=True)
    paths = figure_formats.figure_files(directory, stem)
    for path in paths:
        extra = {"pil_kwargs": dict(figure_versions.PNG_OPTIONS)} if path.suffix == ".png" else {}
        fig.savefig(path, dpi=figure_versions.PNG_DPI, bbox_inches="tight", **extra)
    plt.close(fig)
    return paths
