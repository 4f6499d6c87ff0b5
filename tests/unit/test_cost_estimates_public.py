"""Costs of public traces' kernels that no op describes, checked against the file itself: every expected FLOP count
is computed here from the shapes the JSON holds (plain Python), never from kernelscope's own output."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.analyze.costs.kernel_costs import kernel_costs
from kernelscope.load.sources import read_trace

PUBLIC = Path(__file__).resolve().parents[1] / "data" / "public"
MI300_QWEN = PUBLIC / "tracelens" / "traces__mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
WIDTH = 3


def _gemm_flops(op: dict) -> float | None:
    """2·M·N·K of an ATen matrix op from its recorded input dims."""
    dims = op["args"].get("Input Dims") or []
    name = op["name"]
    if name == "aten::bmm" and len(dims[0]) == 3:
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2.0 * b * m * n * k
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2.0 * m * n * k
    if name == "aten::addmm":
        (m, k), (_, n) = dims[1], dims[2]
        return 2.0 * m * n * k
    return None


def test_kernels_without_a_launch_record_take_the_cost_of_the_same_kernel_between_the_same_neighbours():
    """The MI300X trace's first 463 kernels have no launch record (no op, no grid). A GEMM among them runs between the
    same kernels as launched GEMMs whose ops the file records: it is costed as those, labelled `estimated`."""
    with gzip.open(MI300_QWEN) as f:
        events = json.load(f)["traceEvents"]
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    ops_by_external = defaultdict(list)
    for e in events:
        if e.get("cat") == "cpu_op":
            ops_by_external[e["args"].get("External id")].append(e)
    streams = defaultdict(list)
    for e in events:
        if e.get("cat") == "kernel":
            streams[(e["args"]["device"], e["args"]["stream"])].append(e)
    windows: dict[tuple, set[float]] = defaultdict(set)  # the names around a launched GEMM → its FLOPs
    unlaunched = []
    for seq in streams.values():
        seq.sort(key=lambda e: e["ts"])
        names = [e["name"] for e in seq]
        for i, e in enumerate(seq):
            if i < WIDTH or i + WIDTH >= len(seq):
                continue
            window = tuple(names[i - WIDTH:i + WIDTH + 1])
            if e["args"]["correlation"] not in launched:
                unlaunched.append((e["args"]["correlation"], window))
                continue
            flops = [_gemm_flops(op) for op in ops_by_external.get(e["args"].get("External id"), [])]
            if any(f is not None for f in flops):
                windows[window].add(next(f for f in flops if f is not None))
    expected = {corr: next(iter(windows[w])) for corr, w in unlaunched if len(windows.get(w, ())) == 1}
    assert len(expected) >= 20  # the unlaunched stretch holds many GEMMs with a recorded twin stretch

    kernels, ops = attribute(read_trace(MI300_QWEN))
    costed = kernel_costs(kernels, ops).filter(pl.col("correlation").is_in(list(expected)))
    assert costed.height == len(expected)
    for corr, flops, source, grid in costed.select("correlation", "flops", "cost_source", "grid_x").iter_rows():
        assert grid is None and source == "estimated"
        assert flops == expected[corr], corr


def test_the_estimate_is_never_made_from_the_kernel_name_alone_when_its_launches_disagree():
    """Kernels without a launch record and without a matching neighbourhood stay uncosted when the costed launches of
    the same kernel have different costs: no median of unlike problems."""
    kernels, ops = attribute(read_trace(MI300_QWEN))
    k = kernel_costs(kernels, ops)
    costed = k.filter(pl.col("cost_source").is_not_null() & (pl.col("cost_source") != "estimated"))
    varied = set(costed.group_by("name").agg(pl.col("bytes_moved").n_unique().alias("n"))
                 .filter(pl.col("n") > 1)["name"])
    unlaunched = k.filter(pl.col("grid_x").is_null() & (pl.col("kind") == "kernel"))
    assert unlaunched.height == 463
    # every estimate for a kernel of varied cost equals one of the costs its launched twins have
    for name, nbytes in unlaunched.filter(pl.col("name").is_in(list(varied)) & pl.col("bytes_moved").is_not_null()
                                          ).select("name", "bytes_moved").iter_rows():
        twins = costed.filter(pl.col("name") == name)["bytes_moved"]
        assert twins.min() <= nbytes <= twins.max()


B200 = PUBLIC / "tracelens" / "traces__b200__eager_trace.json.gz"
GPT_OSS = Path(__file__).resolve().parents[1] / "data" / "configs" / "gpt-oss-120b" / "config.json"


def test_a_fused_moe_that_names_no_weights_is_costed_from_the_config_for_this_ranks_share(tmp_path):
    """vLLM's `moe_forward(hidden [T, H], router_logits [T, E], layer)` on a B200 (flashinfer's TRT-LLM MXFP4 MoE
    kernels) names neither weights nor top-k: with the model's config.json, one rank of the trace's world
    (distributedInfo) computes 2·T·top_k·H·(2·I + I)/ranks and reads min(E, T·top_k) experts' share of weights."""
    from kernelscope.cli import main

    with gzip.open(B200) as f:
        trace = json.load(f)
    ranks = trace["distributedInfo"]["world_size"]
    config = json.loads(GPT_OSS.read_text())
    top_k, inter, hidden_cfg = config["num_experts_per_tok"], config["intermediate_size"], config["hidden_size"]
    calls = [e for e in trace["traceEvents"] if e.get("name") == "vllm::moe_forward" and e.get("cat") == "cpu_op"]
    assert len(calls) == config["num_hidden_layers"]
    expected = {}
    for e in calls:
        (t, h), (_, experts) = e["args"]["Input Dims"][0], e["args"]["Input Dims"][1]
        routed = t * top_k
        flops = 2.0 * routed * h * (2 * inter + inter) / ranks
        weights = min(experts, routed) * 3 * hidden_cfg * inter * 0.5 / ranks  # MXFP4: half a byte a weight
        expected[e["ts"]] = (flops, 2 * t * h * 2 + weights)

    assert main(["-q", "import", str(B200), "--model-config", str(GPT_OSS), "--out", str(tmp_path / "r"),
                 "--no-report"]) == 0
    kernels = pl.read_parquet(tmp_path / "r" / "kernels.parquet")
    per_op = (kernels.filter(pl.col("top_op") == "vllm::moe_forward")
              .group_by("top_op_id").agg(pl.col("flops").sum(), pl.col("bytes_moved").sum(),
                                         (pl.col("cost_source") == "model_config").all().alias("from_config"),
                                         pl.col("bytes_moved").is_not_null().all().alias("all_costed")))
    assert per_op.height == len(expected)
    got = sorted(per_op.select("flops", "bytes_moved").iter_rows())
    want = sorted(expected.values())
    for (flops, nbytes), (want_flops, want_bytes) in zip(got, want, strict=True):
        assert flops == pytest.approx(want_flops, rel=1e-9)
        assert nbytes == pytest.approx(want_bytes, rel=1e-9)
    assert per_op["from_config"].all() and per_op["all_costed"].all()


MOE_H200 = Path(__file__).resolve().parents[1] / "data" / "kineto" / "h200-qwen3moe-2l-b4-p128-n3.trace.json.gz"


def test_a_gather_never_takes_the_cost_of_a_same_grid_gather_from_a_larger_table():
    """The MoE's token dispatch gathers 2048 rows from a [512, 1024] table; its combine side gathers from a
    [2048, 1024] one with the same kernel and grid (the grid follows the output). The dispatch must not be costed as
    the larger gather: read and write of 2048 rows of 1024 BF16 plus the int64 indices, computed here."""
    with gzip.open(MOE_H200) as f:
        events = json.load(f)["traceEvents"]
    small = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::index"
             and (e["args"].get("Input Dims") or [[]])[0] == [512, 1024]]
    assert small  # the dispatch gathers the file records
    large_cost = 2 * 2048 * 1024 * 2 + 2048 * 8
    kernels, ops = attribute(read_trace(MOE_H200))
    costed = kernel_costs(kernels, ops)
    dispatch_ids = ops.filter((pl.col("name") == "aten::index") & pl.col("input_dims").cast(pl.String)
                              .str.replace_all(r"\s", "").str.starts_with("[[512,1024]"))["op_id"]
    dispatch = costed.filter(pl.col("op_id").is_in(dispatch_ids.implode()) & (pl.col("kind") == "kernel"))
    assert dispatch.height == len(small)
    assert all(b is None or b < large_cost for b in dispatch["bytes_moved"].to_list())
