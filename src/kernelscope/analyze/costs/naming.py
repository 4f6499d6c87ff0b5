"""Names of kernels in reports: the catalog's columns for every row (CPU ops of CPU-only runs named as
framework ops), a unique label per kernel name, and the share of device time the catalog names."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.costs.catalog import with_catalog
from kernelscope.analyze.wide_tables import time_where
from kernelscope.load import knowledge


def cpu_op_category(name: str) -> tuple[str, str]:
    """The category and English description of a framework op on a CPU-only run, from its name by the rules of
    data/cpu_ops.toml (namespace dropped; the in-place `_` suffix and a private `_` prefix tried away)."""
    base = name.rsplit("::", 1)[-1]
    candidates = dict.fromkeys([base, base.removesuffix("_"), base.lstrip("_"), base.lstrip("_").removesuffix("_")])
    for rule in knowledge.cpu_ops()["rules"]:
        names, prefixes = set(rule.get("names", ())), tuple(rule.get("prefixes", ()))
        if any(c in names or (prefixes and c.startswith(prefixes)) for c in candidates):
            return rule["category"], rule["en"]
    return "other", ""


def with_kernel_catalog(kernels: pl.DataFrame) -> pl.DataFrame:
    """The catalog's columns for device kernels; on CPU-only runs, whose rows are framework ops, the op name
    itself with a category and description from the op name (data/cpu_ops.toml; the catalog describes GPU
    kernels)."""
    k = with_catalog(kernels)
    cpu = pl.col("kind") == "cpu_op"
    names = k.filter(cpu)["name"].unique().to_list()
    known = {name: cpu_op_category(name) for name in names}
    by_name = pl.DataFrame({"name": names, "_cpu_category": [known[n][0] for n in names],
                            "_cpu_description": [known[n][1] for n in names]},
                           schema={"name": pl.String, "_cpu_category": pl.String, "_cpu_description": pl.String})
    k = k.join(by_name, on="name", how="left", maintain_order="left")
    return k.with_columns(
        pl.when(cpu).then(pl.lit(knowledge.cpu_ops()["library"])).otherwise(pl.col("library")).alias("library"),
        pl.when(cpu).then(pl.col("_cpu_category")).otherwise(pl.col("category")).alias("category"),
        pl.when(cpu).then(pl.col("name")).otherwise(pl.col("friendly_name")).alias("friendly_name"),
        pl.when(cpu).then(pl.col("_cpu_description")).otherwise(pl.col("description")).alias("description"),
    ).drop("_cpu_category", "_cpu_description")


def kernel_labels(kernels: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct kernel name: its label in reports (the catalog's friendly name; when several
    names share one, the later ones by total time get #2, #3 …), library, category, description."""
    table = (
        kernels.group_by("name")
        .agg(pl.col("dur_ns").sum().alias("total_ns"), pl.col("friendly_name").first(), pl.col("library").first(),
             pl.col("category").first(), pl.col("description").first())
        .sort("total_ns", "name", descending=[True, False])
        .with_columns(pl.int_range(1, pl.len() + 1).over("friendly_name").alias("_n"))
    )
    return table.with_columns(
        pl.when(pl.col("_n") > 1).then(pl.format("{} #{}", pl.col("friendly_name"), pl.col("_n")))
        .otherwise(pl.col("friendly_name")).alias("label")
    ).drop("_n")


def catalog_coverage(kernels: pl.DataFrame) -> float:
    """Share of device time whose kernel has a known library and category."""
    total = kernels["dur_ns"].sum()
    known = time_where(kernels, (pl.col("library") != "unknown") & (pl.col("category") != "other"))
    return float(known / total) if total else 0.0
