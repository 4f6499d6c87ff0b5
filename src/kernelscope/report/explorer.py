"""The HTML report's interactive parts, drawn as inline SVG (no library, nothing loaded): an icicle of each phase's
layer → module → kernel breakdown (width ∝ time per step; the page's own script zooms into a block on a click)
and a strip of the decode steps' device time. Both read as plain figures without the script. Every name is input
data and is escaped."""

from __future__ import annotations

import html
import unicodedata
from dataclasses import dataclass, field

import polars as pl

from kernelscope.report import formatting as fmt

WIDTH = 1000.0  # SVG user units across
ROW = 24.0  # height of one level
LEVEL_COLORS = ["#4c72b0", "#55a868", "#c44e52", "#8172b2"]


@dataclass
class Node:
    name: str
    value: float
    children: dict[str, Node] = field(default_factory=dict)

    def child(self, name: str) -> Node:
        if name not in self.children:
            self.children[name] = Node(name, 0.0)
        return self.children[name]


def breakdown_tree(phase_word: str, breakdown: pl.DataFrame, terms: dict[str, str]) -> Node | None:
    """phase → layer type → module → kernel, each valued by its device time per step (all layers of a type)."""
    if breakdown.height == 0:
        return None
    root = Node(phase_word, 0.0)
    for row in breakdown.iter_rows(named=True):
        value = float(row["total_ns"]) / max(int(row["steps"] or 1), 1)
        if value <= 0:
            continue
        layer_type = terms.get(row["layer_type"], row["layer_type"]) or "–"
        path = [layer_type, row["layer_module"] or "–", row["label"] or row["name"]]
        node = root
        node.value += value
        for name in path:
            node = node.child(str(name))
            node.value += value
    return root if root.value > 0 else None


def icicle_svg(root: Node, caption: str) -> str:
    """The tree as rows of blocks, the root on top; each block's data-x0/x1 are its span (0–1) for zooming."""
    parts: list[str] = []
    depth_max = [0]

    def place(node: Node, x0: float, depth: int, ident: str) -> None:
        span = node.value / root.value
        depth_max[0] = max(depth_max[0], depth)
        x, w = x0 * WIDTH, span * WIDTH
        label = html.escape(node.name)
        title = html.escape(f"{node.name}: {fmt.duration(node.value)} ({100 * span:.1f}%)")
        shown = _fit(node.name, w)
        parts.append(
            f'<g class="node" data-id="{ident}" data-x0="{x0:.6f}" data-x1="{x0 + span:.6f}" data-depth="{depth}" '
            f'data-label="{label}"><title>{title}</title>'
            f'<rect x="{x:.2f}" y="{depth * ROW:.1f}" width="{max(w - 0.5, 0.1):.2f}" height="{ROW - 2:.1f}" '
            f'fill="{LEVEL_COLORS[depth % len(LEVEL_COLORS)]}" fill-opacity="{0.85 - 0.12 * depth:.2f}"></rect>'
            f'<text x="{x + 3:.2f}" y="{depth * ROW + 15:.1f}">{html.escape(shown)}</text></g>')
        offset = x0
        for i, child in enumerate(sorted(node.children.values(), key=lambda n: -n.value)):
            place(child, offset, depth + 1, f"{ident}.{i}")
            offset += child.value / root.value

    place(root, 0.0, 0, "0")
    height = (depth_max[0] + 1) * ROW
    return (f'<figure class="ks-explorer"><svg class="ks-icicle" viewBox="0 0 {WIDTH:.0f} {height:.0f}" '
            f'preserveAspectRatio="none" role="img" aria-label="{html.escape(root.name)}">{"".join(parts)}</svg>'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _fit(text: str, width: float) -> str:
    """As much of the label as fits a block of `width` user units (about 7 units a Latin character, 12 a wide
    one), else nothing. The page's script measures the labels as drawn and fits them again."""
    room, used = width - 6 - 7, 0.0
    for i, char in enumerate(text):
        used += 12 if unicodedata.east_asian_width(char) in ("W", "F") else 7
        if used > room:
            return text[:i] + "…" if i >= 2 else ""
    return text


def step_strip_svg(steps: pl.DataFrame, caption: str) -> str | None:
    """One bar per decode step, its height ∝ the step's device time from 0; a tooltip names the step and its time.
    The scale: a line at the top (the longest step) and a dashed one at the median step, both named in the caption
    (`{top}` and `{median}` in `caption` are filled with their durations)."""
    decode = steps.filter(pl.col("phase") == "decode").sort("step") if "phase" in steps.columns else steps.sort("step")
    if decode.height < 2:
        return None
    times = decode["device_time_ns"].cast(pl.Float64).to_list()
    top = max(times) or 1.0
    bar = WIDTH / len(times)
    height = 80.0
    bars = []
    for i, (step, value) in enumerate(zip(decode["step"].to_list(), times, strict=True)):
        h = max(height * value / top, 1.0)
        title = html.escape(f"{step}: {fmt.duration(value)}")
        bars.append(f'<rect class="step" x="{i * bar:.2f}" y="{height - h:.2f}" '
                    f'width="{max(bar - 1, 0.5):.2f}" height="{h:.2f}"><title>{title}</title></rect>')
    median = sorted(times)[len(times) // 2] if len(times) % 2 else sum(sorted(times)[len(times) // 2 - 1:][:2]) / 2
    y_median = height - max(height * median / top, 1.0)
    scale = (f'<line class="scale" x1="0" y1="0.5" x2="{WIDTH:.0f}" y2="0.5" stroke="#888" stroke-width="1"></line>'
             f'<line class="scale" x1="0" y1="{y_median:.2f}" x2="{WIDTH:.0f}" y2="{y_median:.2f}" stroke="#444" '
             f'stroke-width="1" stroke-dasharray="6 4"></line>')
    text = caption.replace("{top}", fmt.duration(top)).replace("{median}", fmt.duration(median))
    return (f'<figure class="ks-steps"><svg class="ks-strip" viewBox="0 0 {WIDTH:.0f} {height:.0f}" '
            f'preserveAspectRatio="none" role="img">{"".join(bars)}{scale}</svg>'
            f"<figcaption>{html.escape(text)}</figcaption></figure>")
