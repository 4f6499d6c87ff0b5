"""Layer → module → kernel breakdown: time per layer per step, per layer type (shared/seeds/002's shape).

A kernel belongs to a decoder layer when its module's qualified name has a layer index
(model.layers.3.mlp.down_proj → layer 3, module 'mlp.down_proj' within the layer). Kernels outside the
decoder layers (embedding, final norm, LM head, generate()'s own work) form the group 'outside layers'.
"""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.launch_counts import launch_count
from kernelscope.analyze.ranks.ranks import rank_count
from kernelscope.analyze.wide_tables import as_codes, as_text, beside
from kernelscope.contracts.tables import INSTANCES

OUTSIDE = "outside layers"
LAYER_ITSELF = "(layer)"
# What the layer tables read of a kernels table: selected first, so that filters and joins copy only these.
LAYER_INPUT_COLUMNS = ("phase", "layer", "module", "name", "dur_ns", "start_ns", INSTANCES, "rank")


def module_in_layer() -> pl.Expr:
    """The module's name within its layer: everything after the layer index ('' for the layer itself)."""
    return pl.col("module").str.replace(r"^(?:.*?\.)?\d+(?:\.|$)", "")


def with_layer_type(kernels: pl.DataFrame, layer_types: dict[int, str]) -> pl.DataFrame:
    """Adds layer_type: the type of the kernel's layer ("layer" where the run names none), OUTSIDE without one."""
    types = pl.DataFrame(
        {"layer": list(layer_types), "layer_type": list(layer_types.values())},
        schema={"layer": pl.Int64, "layer_type": pl.String},
    )
    # beside, not joined: the wide kernels table is not copied
    return beside(kernels, types, ["layer"]).with_columns(
        pl.when(pl.col("layer").is_null()).then(pl.lit(OUTSIDE)).otherwise(pl.col("layer_type").fill_null("layer"))
        .alias("layer_type"))


def with_layer_columns(kernels: pl.DataFrame, layer_types: dict[int, str]) -> pl.DataFrame:
    """Adds layer_type (with_layer_type) and layer_module (the module's name within its layer)."""
    # The name within the layer, worked out once per distinct module (a regex over every kernel row was most of
    # this function's time on big runs).
    modules = kernels.select(pl.col("module").unique().drop_nulls()).with_columns(module_in_layer().alias("_within"))
    within = pl.col("_within")
    return (
        beside(with_layer_type(kernels, layer_types), modules, ["module"])
        .with_columns(
            pl.when(pl.col("layer").is_null())
            .then(pl.col("module").fill_null("(no module)"))
            .otherwise(pl.when(within == "").then(pl.lit(LAYER_ITSELF)).otherwise(within))
            .alias("layer_module"),
        )
        .drop("_within")
    )


def layer_breakdown(kernels: pl.DataFrame, layer_types: dict[int, str], steps: dict[str, int]) -> pl.DataFrame:
    """Rows: phase, layer_type, layer_module, kernel name → per_layer_step_ns (time per layer per step),
    launches_per_layer_step, layers (how many layers of the type), total_ns. Ordered as executed. A run of
    several ranks gives both per rank (its sums divided by `ranks`): what one GPU spends, as per-GPU tables do."""
    kernels = _layer_inputs(kernels)
    ranks = rank_count(kernels)
    k = with_layer_columns(_per_module_and_name(kernels), layer_types)
    layer_counts = _layer_counts(k, layer_types)
    step_counts = pl.DataFrame({"phase": list(steps), "steps": list(steps.values())},
                               schema={"phase": pl.String, "steps": pl.Int64})
    rows = (
        k.group_by("phase", "layer_type", "layer_module", "name")
        .agg(pl.col("total_ns").sum(), pl.col("launches").sum(), pl.col("_first").min())
        .join(layer_counts, on="layer_type", how="left")
        .join(step_counts, on="phase", how="left")
        .with_columns(pl.col("layers").fill_null(1), pl.col("steps").fill_null(1), pl.lit(ranks).alias("ranks"))
        .with_columns(
            (pl.col("total_ns") / (pl.col("layers") * pl.col("steps") * ranks)).alias("per_layer_step_ns"),
            (pl.col("launches") / (pl.col("layers") * pl.col("steps") * ranks)).alias("launches_per_layer_step"),
        )
    )
    # Execution order: layer types by first start, modules by first start within the type, then kernels; ties in
    # start (a CPU op and the op it calls begin together) broken by name, so every run gives the same rows.
    order = rows.group_by("phase", "layer_type").agg(pl.col("_first").min().alias("_type_first"))
    module_order = rows.group_by("phase", "layer_type", "layer_module").agg(pl.col("_first").min().alias("_mod_first"))
    return (
        rows.join(order, on=["phase", "layer_type"])
        .join(module_order, on=["phase", "layer_type", "layer_module"])
        .with_columns((pl.col("layer_type") == OUTSIDE).alias("_outside"))
        .sort("phase", "_outside", "_type_first", "layer_type", "_mod_first", "layer_module", "_first", "name",
              nulls_last=True)
        .select("phase", "layer_type", "layer_module", "name", "layers", "steps", "ranks",
                "per_layer_step_ns", "launches_per_layer_step", "total_ns")
    )


def layer_type_totals(breakdown: pl.DataFrame) -> pl.DataFrame:
    """Per phase and layer type: time per layer per step, number of layers, time per step for all of them."""
    return (
        breakdown.group_by("phase", "layer_type", maintain_order=True)
        .agg(
            pl.col("per_layer_step_ns").sum().alias("per_layer_step_ns"),
            pl.col("launches_per_layer_step").sum().alias("launches_per_layer_step"),
            pl.col("layers").first(),
            pl.col("total_ns").sum(),
            pl.col("steps").first(),
            pl.col("ranks").first(),
        )
        .with_columns((pl.col("total_ns") / (pl.col("steps") * pl.col("ranks"))).alias("per_step_ns"))
        .with_columns((100.0 * pl.col("total_ns") / pl.col("total_ns").sum().over("phase")).alias("time_pct"))
    )


def per_layer_times(kernels: pl.DataFrame, layer_types: dict[int, str], steps: dict[str, int]) -> pl.DataFrame:
    """Per phase and layer index: device time per step (per rank, in a run of several) and its type."""
    kernels = _layer_inputs(kernels)
    ranks = rank_count(kernels)
    per_layer = (kernels.filter(pl.col("layer").is_not_null())
                 .group_by("phase", "layer")
                 .agg(pl.col("dur_ns").sum().alias("total_ns"), launch_count().alias("launches")))
    k = with_layer_type(per_layer, layer_types)
    step_counts = pl.DataFrame({"phase": list(steps), "steps": list(steps.values())},
                               schema={"phase": pl.String, "steps": pl.Int64})
    return (
        k.select("phase", "layer", "layer_type", "total_ns", "launches")
        .join(step_counts, on="phase", how="left")
        .with_columns(pl.col("steps").fill_null(1), pl.lit(ranks).alias("ranks"))
        .with_columns((pl.col("total_ns") / (pl.col("steps") * ranks)).alias("per_step_ns"))
        .sort("phase", "layer")
    )


def _layer_inputs(kernels: pl.DataFrame) -> pl.DataFrame:
    return kernels.select(c for c in LAYER_INPUT_COLUMNS if c in kernels.columns)


def _per_module_and_name(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per phase, layer, module and kernel name: total_ns, launches and the first start (_first), grouped by codes;
    the few rows left get their layer columns after."""
    text = ("phase", "module", "name")
    return (
        kernels.with_columns(as_codes(*text))
        .group_by("phase", "layer", "module", "name")
        .agg(pl.col("dur_ns").sum().alias("total_ns"), launch_count().alias("launches"),
             pl.col("start_ns").min().alias("_first"))
        .with_columns(as_text(*text))
    )


def _layer_counts(k: pl.DataFrame, layer_types: dict[int, str]) -> pl.DataFrame:
    if layer_types:
        counts: dict[str, int] = {}
        for label in layer_types.values():
            counts[label] = counts.get(label, 0) + 1
        known = pl.DataFrame({"layer_type": list(counts), "layers": list(counts.values())},
                             schema={"layer_type": pl.String, "layers": pl.Int64})
    else:
        known = pl.DataFrame(schema={"layer_type": pl.String, "layers": pl.Int64})
    observed = (
        k.select("layer", "layer_type").filter(pl.col("layer").is_not_null())
        .group_by("layer_type")
        .agg(pl.col("layer").n_unique().cast(pl.Int64).alias("observed"))
    )
    return (
        observed.join(known, on="layer_type", how="full", coalesce=True)
        .with_columns(pl.coalesce("layers", "observed").alias("layers"))
        .select("layer_type", "layers")
    )
