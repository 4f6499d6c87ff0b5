"""What a run asks of hardware: bandwidth and compute needed for target latencies, the share of decode time a
fixed-function unit could take, and working sets (weights per layer, KV cache per token) against cache sizes.
Everything comes from the run's analytic costs, timings and model config."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.costs.roofline import cost_coverage
from kernelscope.analyze.hardware import Ceilings
from kernelscope.analyze.structure.phases import step_counts
from kernelscope.contracts.run_info import RunInfo, Workload

# Kernel categories a fixed-function block next to the matrix engine could run (no large matrix products).
FIXED_FUNCTION_CATEGORIES = ["norm", "activation", "rope", "softmax", "sampling", "elementwise", "copy/cast",
                             "concat", "reduction", "index/gather/scatter", "sort/topk"]
TPOT_TARGETS_MS = [50.0, 20.0, 10.0, 5.0, 2.0]
TTFT_TARGETS_MS = [500.0, 200.0, 100.0, 50.0]
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# The share of a phase's device time whose kernels have analytic costs below which its bytes and FLOPs say too
# little to size hardware by (foreign traces of CUDA-graph replays have almost none; kernelscope's own runs all).
MIN_COST_COVERAGE = 0.5


@dataclass
class AcceleratorNeeds:
    decode_bytes_per_step: float | None = None
    decode_flops_per_step: float | None = None
    prefill_flops: float | None = None
    prefill_bytes: float | None = None
    tpot_ms: float | None = None
    ttft_ms: float | None = None
    bandwidth_floor_tpot_ms: float | None = None  # bytes per step at this device's bandwidth
    # Share of each phase's device time whose kernels have a cost model (the rest count no bytes or FLOPs).
    decode_cost_coverage: float | None = None
    prefill_cost_coverage: float | None = None
    requirements: pl.DataFrame = field(default_factory=pl.DataFrame)  # target → bandwidth / compute needed
    fixed_function: pl.DataFrame = field(default_factory=pl.DataFrame)  # category → share of decode time
    fixed_function_pct: float | None = None
    weights_per_layer: pl.DataFrame = field(default_factory=pl.DataFrame)  # layer type → bytes per layer
    weight_bytes_per_step: float | None = None
    kv_bytes_per_token: float | None = None
    kv_bytes_at_context: float | None = None
    context_tokens: int | None = None
    l2_bytes: float | None = None


def accelerator_needs(kernels: pl.DataFrame, info: RunInfo, ceilings: Ceilings | None,
                      categories: dict[str, pl.DataFrame], layer_types: dict[int, str]) -> AcceleratorNeeds:
    needs = AcceleratorNeeds()
    needs.tpot_ms, needs.ttft_ms = info.plain_timings.tpot_ms, info.plain_timings.ttft_ms
    decode = kernels.filter(pl.col("phase") == ranges.DECODE)
    prefill = kernels.filter(pl.col("phase") == ranges.PREFILL)
    needs.decode_cost_coverage = cost_coverage(decode) if decode.height else None
    needs.prefill_cost_coverage = cost_coverage(prefill) if prefill.height else None
    steps = step_counts(decode).get(ranges.DECODE, 1) if decode.height else 1  # once: both uses divide by it
    if decode.height:
        needs.decode_bytes_per_step = float(decode["bytes_moved"].sum()) / steps
        needs.decode_flops_per_step = float(decode["flops"].sum()) / steps
        if ceilings is not None and ceilings.bandwidth:
            needs.bandwidth_floor_tpot_ms = 1e3 * needs.decode_bytes_per_step / ceilings.bandwidth
    if prefill.height:
        needs.prefill_flops = float(prefill["flops"].sum())
        needs.prefill_bytes = float(prefill["bytes_moved"].sum())
    needs.requirements = _requirements(needs)
    if ranges.DECODE in categories:
        mix = categories[ranges.DECODE]
        needs.fixed_function = mix.filter(pl.col("category").is_in(FIXED_FUNCTION_CATEGORIES))
        needs.fixed_function_pct = float(needs.fixed_function["time_pct"].sum())
    needs.weights_per_layer, needs.weight_bytes_per_step = _weights(decode, layer_types, steps)
    needs.kv_bytes_per_token, needs.kv_bytes_at_context, needs.context_tokens = _kv(info)
    needs.l2_bytes = (ceilings.spec.l2_bytes if ceilings and ceilings.spec else None) or info.hardware.l2_cache_bytes
    return needs


def costs_cover(coverage: float | None) -> bool:
    return coverage is not None and coverage >= MIN_COST_COVERAGE


def _requirements(needs: AcceleratorNeeds) -> pl.DataFrame:
    """Bandwidth and compute that target latencies need, for the phases whose analytic costs cover enough of
    their time (costs_cover)."""
    rows = []
    if needs.decode_bytes_per_step and costs_cover(needs.decode_cost_coverage):
        targets = ([needs.tpot_ms] if needs.tpot_ms else []) + _faster(TPOT_TARGETS_MS, needs.tpot_ms)
        for target in targets:
            rows.append(("decode", "TPOT", target, target == needs.tpot_ms,
                         needs.decode_bytes_per_step / (target / 1e3),
                         needs.decode_flops_per_step / (target / 1e3)))
    if needs.prefill_flops and costs_cover(needs.prefill_cost_coverage):
        targets = ([needs.ttft_ms] if needs.ttft_ms else []) + _faster(TTFT_TARGETS_MS, needs.ttft_ms)
        for target in targets:
            rows.append(("prefill", "TTFT", target, target == needs.ttft_ms,
                         needs.prefill_bytes / (target / 1e3), needs.prefill_flops / (target / 1e3)))
    return pl.DataFrame(rows, orient="row", schema={
        "phase": pl.String, "latency": pl.String, "target_ms": pl.Float64, "measured": pl.Boolean,
        "bandwidth_bytes_per_s": pl.Float64, "compute_flops_per_s": pl.Float64})


def _faster(targets: list[float], measured: float | None) -> list[float]:
    """The targets a design would aim for: those faster than the measured latency (a slower one asks for less than
    the run already has)."""
    return [t for t in targets if measured is None or t < measured]


def _weights(decode: pl.DataFrame, layer_types: dict[int, str], steps: int) -> tuple[pl.DataFrame, float | None]:
    """Bytes the matrix products of one layer read per decode step (at batch 1, the layer's weights), per
    layer type: the mean over its layers. steps: the decode steps (step_counts)."""
    if not decode.height:
        return pl.DataFrame(), None
    matmul = (decode.select("category", "bytes_moved", "layer")  # the columns read, before a filter copies them
              .filter(pl.col("category").is_in(["GEMM", "GEMV"]) & pl.col("bytes_moved").is_not_null()))
    total = float(matmul["bytes_moved"].sum()) / steps
    types = pl.DataFrame({"layer": list(layer_types), "layer_type": list(layer_types.values())},
                         schema={"layer": pl.Int64, "layer_type": pl.String})
    per_layer = (
        matmul.filter(pl.col("layer").is_not_null())
        .group_by("layer").agg((pl.col("bytes_moved").sum() / steps).alias("bytes_per_step"))
        .join(types, on="layer", how="left")
        .with_columns(pl.col("layer_type").fill_null("layer"))
        .group_by("layer_type")
        .agg(pl.len().alias("layers"), pl.col("bytes_per_step").mean().alias("bytes_per_layer_step"),
             pl.col("layer").min().alias("_first"))
        .sort("_first").drop("_first")
    )
    return per_layer, total


def _kv(info: RunInfo) -> tuple[float | None, float | None, int | None]:
    """KV-cache bytes per token: keys and values for every layer and KV head (MLA models: the compressed
    latent plus the rotary key per layer)."""
    config = info.model.config if info.model is not None else {}
    workload = info.workload or Workload()
    layers = config.get("num_hidden_layers")
    size = DTYPE_BYTES.get(workload.dtype or "", 2)
    if not layers:
        return None, None, None
    if config.get("kv_lora_rank"):
        per_layer = config["kv_lora_rank"] + (config.get("qk_rope_head_dim") or 0)
    else:
        heads = config.get("num_key_value_heads") or config.get("num_attention_heads")
        head_dim = config.get("head_dim") or (config.get("hidden_size", 0) // max(config.get("num_attention_heads") or 1, 1))
        if not heads or not head_dim:
            return None, None, None
        per_layer = 2 * heads * head_dim
    per_token = float(per_layer * layers * size)
    context = (workload.prompt_len or 0) + (workload.new_tokens or 0)
    batch = workload.batch_size or 1
    return per_token, per_token * context * batch, context or None
