"""The finding that names the framework op whose host time decides much of each step, on an eager transformers
decode recorded on an H200 (tests/data/foreign/captured): its time on the critical path lies between what the file
itself says must be on the path (the op's time on the host, outside its runtime calls, while the GPU runs
nothing) and the op's whole CPU time (plain json)."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import pytest

from kernelscope.cli import main

TRACE = Path(__file__).resolve().parents[1] / "data" / "foreign" / "captured" / "hf_decode_spins_interleaved.json.gz"
OP = "aten::scaled_dot_product_attention"


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _minus(intervals: list[tuple[float, float]], holes: list[tuple[float, float]]) -> float:
    """Length of `intervals` (disjoint) outside `holes` (disjoint, sorted)."""
    total, j = 0.0, 0
    for start, end in intervals:
        covered = 0.0
        while j < len(holes) and holes[j][1] <= start:
            j += 1
        k = j
        while k < len(holes) and holes[k][0] < end:
            covered += min(end, holes[k][1]) - max(start, holes[k][0])
            k += 1
        total += (end - start) - covered
    return total


def _bounds_from_the_file() -> tuple[float, float, float, int]:
    """(ns that must be on the path, the op's whole CPU ns, the steps' span in ns, the steps), from the trace's
    events."""
    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("cat") == "user_annotation" and e["name"].startswith("ks.phase:decode:")]
    inside = lambda e: any(a <= e["ts"] <= b for a, b in steps)  # noqa: E731
    op = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == OP and inside(e)]
    calls = _union([(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "cuda_runtime"])
    busy = _union([(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy")])
    must = _minus(_minus_intervals(_union(op), calls), busy)
    last_device_end = max(b for _, b in busy)
    return must * 1e3, sum(b - a for a, b in op) * 1e3, (last_device_end - steps[0][0]) * 1e3, len(steps)


def _minus_intervals(intervals: list[tuple[float, float]], holes: list[tuple[float, float]]
                     ) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in intervals:
        cursor = start
        for a, b in holes:
            if b <= cursor or a >= end:
                continue
            if a > cursor:
                out.append((cursor, a))
            cursor = max(cursor, b)
        if cursor < end:
            out.append((cursor, end))
    return out


@pytest.fixture(scope="module")
def findings(tmp_path_factory) -> dict[str, dict[str, str]]:
    out = tmp_path_factory.mktemp("host-op") / "run"
    assert main(["-q", "import", str(TRACE), "--out", str(out)]) == 0
    with open(out / "report" / "tables" / "findings.csv", newline="") as table:
        rows = [r for r in csv.DictReader(table) if r["rule"] == "decode-host-op-on-path"]
    return {"numbers": {r["number"]: r for r in rows}, "report": (out / "report" / "report.md").read_text()}


def test_the_op_that_holds_the_step_on_the_host_is_named_with_its_time(findings):
    numbers = findings["numbers"]
    assert numbers, "the finding should hold on this run"
    assert numbers["decode_path_host_op"]["value"] == OP
    must, whole, span, steps = _bounds_from_the_file()
    on_path = float(numbers["decode_path_host_op_ns_per_step"]["value"]) * steps
    assert 0.99 * must <= on_path <= whole * 1.001
    assert must / span >= 0.20  # the file alone puts a fifth of the steps on this op's host time
    assert "aten::scaled\\_dot\\_product\\_attention" in findings["report"]
    share = float(numbers["decode_path_host_op_pct"]["value"])
    assert f"{share:.1f}%" in findings["report"]
