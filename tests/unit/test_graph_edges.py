"""The dependency graph's grouping codes (analyze/paths/graph_edges.dense_codes) on a real trace's device work."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from kernelscope.analyze.paths.graph_edges import dense_codes

TRACE = Path(__file__).resolve().parents[1] / "data/public/hta/data__trace_filter__sampled_rank-0.json.gz"


def _device_events() -> list[dict]:
    with gzip.open(TRACE, "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("cat") == "kernel" and "stream" in e.get("args", {})]


def test_each_combination_gets_its_rank_in_lexicographic_order():
    events = _device_events()
    device = np.array([e["args"].get("device", -1) for e in events], dtype=np.int64)
    stream = np.array([e["args"]["stream"] for e in events], dtype=np.int64)
    # Shifted copies: negative values, and more combinations than either column has values alone.
    pid = np.array([int(e["pid"]) % 3 - 1 for e in events], dtype=np.int64)
    pairs = list(zip(device.tolist(), stream.tolist(), pid.tolist(), strict=True))
    ranked = {pair: i for i, pair in enumerate(sorted(set(pairs)))}
    assert len(ranked) > 2
    assert dense_codes(device, stream, pid).tolist() == [ranked[p] for p in pairs]
    one = {v: i for i, v in enumerate(sorted(set(stream.tolist())))}
    assert dense_codes(stream).tolist() == [one[v] for v in stream.tolist()]
    assert dense_codes(np.zeros(0, dtype=np.int64)).tolist() == []
