"""What runs of one workload on two devices tell the projection model about the devices themselves
(docs/whatif.md, "Calibration"): whatever the software or the workload does to a run, it does to both sides of a
pair, so the ratio of the two sides is the devices' ratio.

- Per-kernel latency: each run is fitted with a latency scale of its own; across a pair the ratio of the two scales
  is the devices' ratio (scales_from_pairs).
- Roofs and per-kind latency: a device whose ceilings are datasheet values (no calibration of it measured here) gets
  the share of its bandwidth and of its compute peaks that its pairs show it reaches, and its per-kernel latency per
  kind of work (projection_kinds); with_roofs applies the shares.
"""

from __future__ import annotations

import numpy as np

from kernelscope.analyze.projection.projection import Target


def scales_from_pairs(run_scales: dict[str, float], run_device: dict[str, str],
                      pairs: list[tuple[str, str]]) -> dict[str, float]:
    """Per device, a latency scale from runs fitted with a scale each: across a pair (one workload on two devices)
    the ratio of the two runs' scales is the devices' ratio, whatever the software or workload did to both; a
    least-squares solution over every pair, its level set by the runs' own scales (weakly). A device in no pair takes
    the geometric mean of its runs' scales."""
    paired = sorted({run_device[r] for pair in pairs for r in pair if r in run_device})
    index = {d: i for i, d in enumerate(paired)}
    rows, values = [], []
    for a, b in pairs:
        if a in run_scales and b in run_scales and run_device[a] != run_device[b]:
            row = np.zeros(len(paired))
            row[index[run_device[b]]], row[index[run_device[a]]] = 1.0, -1.0
            rows.append(row)
            values.append(np.log(run_scales[b] / run_scales[a]))
    level = 0.1  # the runs' own scales only set the level the pairs leave free
    for run, scale in run_scales.items():
        if run_device[run] in index:
            row = np.zeros(len(paired))
            row[index[run_device[run]]] = level
            rows.append(row)
            values.append(level * np.log(scale))
    out: dict[str, float] = {}
    if paired and rows:
        solution = np.linalg.lstsq(np.array(rows), np.array(values), rcond=None)[0]
        out = {d: float(np.exp(solution[i])) for d, i in index.items()}
    for device in set(run_device.values()) - set(out):
        logs = [np.log(v) for r, v in run_scales.items() if run_device[r] == device]
        out[device] = float(np.exp(np.mean(logs))) if logs else 1.0
    return {d: round(v, 4) for d, v in sorted(out.items())}


def with_roofs(target: Target, shares: tuple[float, float]) -> Target:
    memory, compute = shares
    return target.changed(bandwidth=target.bandwidth * memory,
                          flops={k: v * compute for k, v in target.flops.items()})
