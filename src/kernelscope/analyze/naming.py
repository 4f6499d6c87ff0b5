"""Names of kernels in reports: the catalog's columns for every row (CPU ops of CPU-only runs named as
framework ops), a unique label per kernel name, and the share of device time the catalog names."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.catalog import with_catalog

CPU_OP_LIBRARY = "PyTorch (CPU op)"


def with_kernel_catalog(kernels: pl.DataFrame) -> pl.DataFrame:
    """The catalog's columns for device kernels; on CPU-only runs, whose rows are framework ops, the op name
    itself (the catalog describes GPU kernels)."""
    k = with_catalog(kernels)
    cpu = pl.col("kind") == "cpu_op"
    return k.with_columns(
        pl.when(cpu).then(pl.lit(CPU_OP_LIBRARY)).otherwise(pl.col("library")).alias("library"),
        pl.when(cpu).then(pl.lit("other")).otherwise(pl.col("category")).alias("category"),
        pl.when(cpu).then(pl.col("name")).otherwise(pl.col("friendly_name")).alias("friendly_name"),
        pl.when(cpu).then(pl.lit("A framework operator on the CPU; its self time stands in for a kernel."))
        .otherwise(pl.col("description")).alias("description"),
    )


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
    known = kernels.filter((pl.col("library") != "unknown") & (pl.col("category") != "other"))["dur_ns"].sum()
    return float(known / total) if total else 0.0
