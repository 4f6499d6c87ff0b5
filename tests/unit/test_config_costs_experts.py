"""Costs from the model's config (`import --model-config`) for a MoE model's experts, checked against the shapes the
same trace recorded before they were removed."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
MOE = DATA / "kineto" / "h200-qwen3moe-2l-b4-p128-n3.trace.json.gz"
CONFIG = DATA / "configs" / "qwen3moe-2l" / "config.json"
SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
ELEMENT = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4}


def test_the_experts_activation_is_costed_over_the_routed_rows_of_one_expert_size(tmp_path):
    """HF's grouped experts apply act_fn to [tokens × top-k, moe_intermediate], not the dense MLP's
    [tokens, intermediate]. Expected per call: the aten::silu's recorded input read and its output written (FLOPs:
    one a element), from the trace with shapes; costed: the same trace without shapes, from config.json."""
    with gzip.open(MOE, "rt") as f:
        trace = json.load(f)
    silu = sorted((e for e in trace["traceEvents"] if e.get("cat") == "cpu_op" and e["name"] == "aten::silu"),
                  key=lambda e: e["ts"])
    expected = []
    for e in silu:
        (dims,), (dtype,) = e["args"]["Input Dims"], e["args"]["Input type"]
        expected.append((float(math.prod(dims)), 2.0 * math.prod(dims) * ELEMENT[dtype]))
    assert len(expected) == 6 and expected[0][0] == 2048 * 512  # prefill: 512 tokens × top 4 rows of 512
    for event in trace["traceEvents"]:
        for key in SHAPE_ARGS:
            (event.get("args") or {}).pop(key, None)
    shapeless = tmp_path / "moe.shapeless.json.gz"
    with gzip.open(shapeless, "wt") as f:
        json.dump(trace, f)
    assert main(["-q", "import", str(shapeless), "--model-config", str(CONFIG), "--batch-size", "4",
                 "--prompt-len", "128", "--out", str(tmp_path / "r"), "--no-report"]) == 0
    kernels = pl.read_parquet(tmp_path / "r" / "kernels.parquet")
    calls = (kernels.filter((pl.col("kind") == "kernel") & pl.col("module").str.ends_with("experts.act_fn"))
             .group_by("phase", "step", "module", maintain_order=True)
             .agg(pl.col("start_ns").min(), pl.col("flops").sum(), pl.col("bytes_moved").sum(),
                  (pl.col("cost_source") == "model_config").all().alias("from_config"))
             .sort("start_ns"))
    assert calls.height == len(expected)
    for (flops, nbytes), (want_flops, want_bytes) in zip(calls.select("flops", "bytes_moved").iter_rows(), expected,
                                                         strict=True):
        assert flops == pytest.approx(want_flops, rel=1e-9)
        assert nbytes == pytest.approx(want_bytes, rel=1e-9)
    assert calls["from_config"].all()
