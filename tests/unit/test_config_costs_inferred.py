"""Costs from the model's config for a layer whose parts were read from the kernel sequence alone: HF generate with
a static cache, its decode compiled by Inductor and replayed as CUDA graphs (tests/data/foreign/captured), whose
replayed kernels have no op, no shapes and no module but the inferred `layers.<i>.attention` / `layers.<i>.mlp`.
Those modules hold their matrix multiplies themselves: they are costed as the projections they are, by hand here
from config.json (a Qwen2-0.5B config cut to 4 layers, as the capture's model was)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "foreign" / "captured" / "hf_generate_compiled.json.gz"
BATCH, PROMPT = 2, 64  # the capture's (benchmarks/foreign/capture.py)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("compiled")
    path = DATA / "configs" / "qwen2-0.5b-4l" / "config.json"
    config = json.loads(path.read_text())
    out = folder / "run"
    assert main(["-q", "import", str(TRACE), "--model-config", str(path), "--batch-size",
                 str(BATCH), "--prompt-len", str(PROMPT), "--no-report", "--out", str(out)]) == 0
    return out, config


def _units(out: Path, part: str) -> pl.DataFrame:
    kernels = pl.read_parquet(out / "kernels.parquet")
    return (kernels.filter((pl.col("phase") == "decode") & pl.col("module").str.ends_with(f".{part}")
                           & pl.col("category").is_in(["GEMM", "GEMV"]))
            .group_by("step", "module").agg(pl.col("flops").sum(), pl.col("bytes_moved").sum(),
                                            pl.col("cost_source").unique()))


def test_the_mlps_matrix_kernels_are_its_gate_up_and_down_projections(run):
    out, config = run
    h, i, t = config["hidden_size"], config["intermediate_size"], BATCH  # one new token per sequence
    shapes = [(t, 2 * i, h), (t, h, i)]  # gate and up as one GEMM (a gated MLP), then down
    flops = sum(2 * m * n * k for m, n, k in shapes)
    nbytes = sum(2 * (m * k + m * n) + 2 * k * n for m, n, k in shapes)  # bfloat16 activations and weights
    units = _units(out, "mlp")
    assert units.height >= 4 * 4  # every layer of every replayed step
    assert units["cost_source"].to_list() == [["model_config"]] * units.height
    assert units["flops"].to_list() == pytest.approx([flops] * units.height)
    assert units["bytes_moved"].to_list() == pytest.approx([nbytes] * units.height)


def test_the_attentions_matrix_kernels_are_its_projections(run):
    out, config = run
    h, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    d = h // heads
    shapes = [(BATCH, (heads + 2 * kv) * d, h), (BATCH, h, heads * d)]
    flops = sum(2 * m * n * k for m, n, k in shapes)
    units = _units(out, "attention")
    assert units.height >= 4 * 4
    assert units["flops"].to_list() == pytest.approx([flops] * units.height)


def test_with_the_config_the_trace_is_costed(run):
    out, _ = run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cost_coverage"] >= 0.95
    kernels = pl.read_parquet(out / "kernels.parquet")
    # No matrix kernel takes an elementwise role's cost (the bug this guards: a GEMM in an inferred `mlp` costed as
    # the MLP's product).
    gemms = kernels.filter(pl.col("category").is_in(["GEMM", "GEMV"]) & (pl.col("cost_source") == "model_config"))
    assert set(gemms["cost_model"].unique().to_list()) <= {"config.gemm"}
