"""Held-out captures (tests/data/structure, README there): plain torch.profiler traces of six programs that pushed
no annotation, each with the truth its program recorded when it ran (`<name>.truth.json`). Imported with
`kernelscope import`, each must give that truth: forward passes, prefill and decode steps, decoder layers, training
steps; a level left unknown must say why.

Independently of kernelscope, the trace file itself (plain json) checks where the kernels were put: every inferred
layer is one unbroken stretch of the file's launch order, the layers of a pass follow each other in order; every
forward pass holds the kernels of exactly one of the file's forward calls (an `aten::embedding` op, a compiled
graph's call), in the order the program ran them; in training, every kernel is in the profiler step it was
launched in, and in the part (forward, backward, optimizer) of the op that launched it."""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

STRUCTURE = Path(__file__).resolve().parents[1] / "data" / "structure"
CAPTURES = sorted(p.name.removesuffix(".truth.json") for p in STRUCTURE.glob("*.truth.json"))
COUNTS = ("forward_passes", "prefill_steps", "decode_steps", "layers", "training_steps")
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def test_the_held_out_captures_are_there():
    assert len(CAPTURES) == 6


# ---------------------------------------------------------------- what the file holds, read with plain json
class TraceFile:
    def __init__(self, path: Path) -> None:
        with gzip.open(path, "rt") as f:
            self.events = json.load(f)["traceEvents"]
        launches = {e["args"]["correlation"]: (e["ts"], e["tid"]) for e in self.events
                    if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})}
        device = [e for e in self.events if e.get("cat") in DEVICE_CATS]
        self.correlations = [e["args"]["correlation"] for e in device]
        assert len(set(self.correlations)) == len(device)  # one device event per launch: no graph replays here
        self.launch = {c: launches[c] for c in self.correlations}
        # launch order: by launch call, then start on the device
        ordered = sorted(device, key=lambda e: (launches[e["args"]["correlation"]][0], e["ts"]))
        self.position = {e["args"]["correlation"]: i for i, e in enumerate(ordered)}

    def ranges(self, cat: str, match) -> list[dict]:
        return sorted((e for e in self.events if e.get("cat") == cat and e.get("ph") == "X" and match(e["name"])),
                      key=lambda e: e["ts"])

    def launched_in(self, ranges: list[dict]) -> dict[int, int]:
        """correlation → index of the range (same thread) whose span holds the kernel's launch call."""
        out = {}
        for c, (t, tid) in self.launch.items():
            for i, r in enumerate(ranges):
                if r["tid"] == tid and r["ts"] <= t <= r["ts"] + r["dur"]:
                    out[c] = i
        return out


@cache
def _trace(name: str) -> TraceFile:
    return TraceFile(STRUCTURE / f"{name}.json.gz")


# ---------------------------------------------------------------- kernelscope's answer, one import per capture
@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    runs: dict[str, Path] = {}

    def run(name: str) -> Path:
        if name not in runs:
            out = tmp_path_factory.mktemp("held-out") / name
            assert main(["-q", "import", str(STRUCTURE / f"{name}.json.gz"), "--out", str(out), "--no-report"]) == 0
            runs[name] = out
        return runs[name]

    return run


def _truth(name: str) -> dict:
    return json.loads((STRUCTURE / f"{name}.truth.json").read_text())


@pytest.mark.parametrize("name", CAPTURES)
def test_counts_are_the_truth(imported, name):
    out = imported(name)
    truth = _truth(name)
    structure = json.loads((out / "summary.json").read_text())["structure"]
    levels = json.loads((out / "run.json").read_text())["attribution"]["structure"]
    assert structure["source"] == "inferred"
    for key in COUNTS:
        if key in truth:
            assert structure[key] == truth[key], (key, structure)
    # a level left unknown says why
    assert all(isinstance(why, str) and why for why in structure["unknown"].values())
    assert all(level.get("reason") for level in levels if level["status"] == "unknown")
    kernels = pl.read_parquet(out / "kernels.parquet", columns=["layer", "attribution_source"])
    assert set(kernels.filter(pl.col("layer").is_not_null())["attribution_source"]) == {"inferred"}


@pytest.mark.parametrize("name", CAPTURES)
def test_layers_are_unbroken_stretches_of_the_files_launch_order(imported, name):
    truth = _truth(name)
    trace = _trace(name)
    kernels = pl.read_parquet(imported(name) / "kernels.parquet", columns=["correlation", "phase", "step", "layer"])
    assert sorted(kernels["correlation"].to_list()) == sorted(trace.correlations)
    spans: dict[tuple, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for correlation, phase, step, layer in kernels.filter(pl.col("layer").is_not_null()).iter_rows():
        spans[(phase, step)][layer].append(trace.position[correlation])
    passes = truth.get("forward_passes", truth.get("training_steps"))
    assert len(spans) == passes
    for layers in spans.values():
        assert sorted(layers) == list(range(truth["layers"]))
        bounds = []
        for layer in range(truth["layers"]):
            positions = layers[layer]
            # as many kernels as the file launched between the layer's first and last
            assert max(positions) - min(positions) + 1 == len(positions), layer
            bounds.append((min(positions), max(positions)))
        assert all(a[1] < b[0] for a, b in zip(bounds[:-1], bounds[1:], strict=True))


def _forward_calls(trace: TraceFile) -> list[dict]:
    """The file's own marks of a forward pass starting: the embedding lookup of an eager model, the call of a
    compiled graph (the program compiled `model.forward`)."""
    eager = trace.ranges("cpu_op", lambda n: n == "aten::embedding")
    compiled = trace.ranges("user_annotation", lambda n: n.startswith("## Call CompiledFxGraph"))
    return sorted(eager + compiled, key=lambda e: e["ts"])


@pytest.mark.parametrize("name", [n for n in CAPTURES if "forward_passes" in _truth(n)])
def test_each_pass_holds_one_forward_call_of_the_file(imported, name):
    truth = _truth(name)
    trace = _trace(name)
    calls = _forward_calls(trace)
    assert len(calls) == truth["forward_passes"]
    inside = trace.launched_in(calls)
    kernels = pl.read_parquet(imported(name) / "kernels.parquet", columns=["correlation", "phase", "step"])
    passes_of_call: dict[int, set] = defaultdict(set)
    for correlation, phase, step in kernels.iter_rows():
        if correlation in inside:
            passes_of_call[inside[correlation]].add((phase, step))
    # the program ran its prefill first, then its decode steps, one forward call each
    expected = [("prefill", s) for s in range(truth["prefill_steps"])] + \
        [("decode", s) for s in range(truth["decode_steps"])]
    assert [passes_of_call[i] for i in range(len(calls))] == [{p} for p in expected]


@pytest.mark.parametrize("name", [n for n in CAPTURES if "training_steps" in _truth(n)])
def test_training_kernels_are_in_their_profiler_step_and_part(imported, name):
    truth = _truth(name)
    trace = _trace(name)
    steps = trace.ranges("user_annotation", lambda n: n.startswith("ProfilerStep#"))
    assert len(steps) == truth["training_steps"]
    optimizer = trace.launched_in(trace.ranges("user_annotation", lambda n: n.startswith("Optimizer.step#")))
    backward = trace.launched_in(trace.ranges("cpu_op", lambda n: n.startswith("autograd::engine::evaluate_function")))
    starts = [s["ts"] for s in steps]
    kernels = pl.read_parquet(imported(name) / "kernels.parquet", columns=["correlation", "phase", "step"])
    for correlation, phase, step in kernels.iter_rows():
        t, _ = trace.launch[correlation]
        # the backward runs on autograd's own thread, outside the ProfilerStep range: the step its launch falls in
        expected_step = bisect.bisect_right(starts, t) - 1
        part = "optimizer" if correlation in optimizer else "backward" if correlation in backward else "forward"
        assert (phase, step) == (part, expected_step), correlation
