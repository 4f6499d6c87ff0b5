"""Op groups: the kernels one framework op launches, taken as one unit (a cuBLASLt GEMM and its split-K
reduction, an attention forward and its combine step, a norm's chain of elementwise kernels).

With CPU events (kernelscope's own runs, most Kineto traces) a group is every kernel launched inside one
instance of an outermost framework op (top_op_id). Without them (imports that lack CPU ops) a kernel joins the
kernel before it on the same stream when it is a known follower: a split-K reduction, an attention combine, a
second stage. A summary row (nsys stats import: no start time, `instances` launches) is a group of its own that
occurs `instances` times."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.launch_counts import launches
from kernelscope.contracts.tables import INSTANCES

FOLLOWER_NAME = r"splitKreduce|splitkv_combine|_combine_kernel|[Ss]tage_?2|stage2"
FOLLOWER_CATEGORIES = ["attention-combine"]


def assign_groups(kernels: pl.DataFrame) -> pl.DataFrame:
    """Adds group_id (the same value for the kernels of one op instance), sorted by start. kernels carry `_follower`
    (follower())."""
    # Runs keep their kernels in time order: sorted (a copy of every column) only where they are not.
    k = kernels if kernels["start_ns"].is_sorted(nulls_last=True) else kernels.sort("start_ns", nulls_last=True)
    # Without an op instance: start a new group unless this kernel follows another on its stream.
    other_lane = (pl.col("stream") != pl.col("stream").shift(1)) | (pl.col("rank") != pl.col("rank").shift(1))
    starts = (~pl.col("_follower") | other_lane | pl.col("start_ns").is_null()).fill_null(True)
    fallback = starts.cast(pl.Int64).cum_sum()
    # A number, not a string per kernel (formatting one was most of the time of this table on big runs): op
    # instances even, runs of kernels without one odd.
    return k.with_columns(
        pl.when(pl.col("top_op_id").is_not_null()).then(2 * pl.col("top_op_id")).otherwise(2 * fallback + 1)
        .alias("group_id"))


def follower() -> pl.Expr:
    """Whether a kernel is the second part of the one before it (a split-K reduction, an attention combine)."""
    return (pl.col("name").str.contains(FOLLOWER_NAME)
            | pl.col("category").is_in(FOLLOWER_CATEGORIES).fill_null(False)).alias("_follower")


# What grouping reads of a kernels table (friendly_name may be set by the caller).
GROUP_COLUMNS = ("kind", "name", "category", "stream", "rank", "start_ns", "top_op_id", "top_op", "friendly_name",
                 "dur_ns", INSTANCES)


def op_group_table(kernels: pl.DataFrame, labels: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per group signature (outermost op + its kernels in launch order): instances, kernels per instance,
    total time, share of the phase and time per instance. Sorted by total time. Kernels are spelled by their
    friendly name, else their name; or, given `labels` (name → label, one distinct label per name: kernel_labels),
    by the label of their name, else their name."""
    # Only the columns grouping reads, before filtering and sorting (each would copy every column of a wide table).
    kernels = kernels.select(c for c in GROUP_COLUMNS if c in kernels.columns)
    # Each row's label as a number and whether it follows the kernel before it, before the kernels are picked out:
    # the filter then copies neither names nor labels. A signature is first a list of label numbers; only the
    # distinct ones are spelled out (joining the names of every instance's kernels made a string per instance).
    if labels is None:
        label = pl.coalesce("friendly_name", "name")
        numbered = kernels.with_columns(label.cast(pl.Categorical).to_physical().alias("_label_id"), follower())
        spelled = numbered.select("_label_id", "friendly_name", "name").unique("_label_id").select("_label_id", label)
    else:
        # Labels are one per name and distinct: a name's number stands for its label. Setting every launch's label
        # beside it (a join on names hundreds of characters long) was a fifth of this table on big runs.
        numbered = kernels.with_columns(pl.col("name").cast(pl.Categorical).to_physical().alias("_label_id"))
        names = numbered.select("_label_id", "name").unique("_label_id")
        # The follower pattern tried once per distinct name, not on every launch's name.
        following = names.filter(pl.col("name").str.contains(FOLLOWER_NAME))["_label_id"]
        numbered = numbered.with_columns(
            (pl.col("_label_id").is_in(following.implode())
             | pl.col("category").is_in(FOLLOWER_CATEGORIES).fill_null(False)).alias("_follower"))
        spelled = (names.join(labels.select("name", "label"), on="name", how="left")
                   .select("_label_id", pl.coalesce("label", "name")))
    label_of = dict(spelled.iter_rows())
    grouped = assign_groups(numbered.select("kind", "stream", "rank", "start_ns", "top_op_id", "top_op", "dur_ns",
                                            INSTANCES, "_label_id", "_follower").filter(pl.col("kind") == "kernel"))
    # Groups in any order: the table is sorted by keys that are unique per row at the end.
    instances = grouped.group_by("group_id").agg(
        pl.col("top_op").first().fill_null("(no framework op)").alias("op"),
        pl.col("_label_id").alias("signature"),
        pl.len().alias("kernel_count"),  # kernels in one instance of the group
        pl.col("dur_ns").sum().alias("group_ns"),
        launches().max().alias("occurrences"),  # 1, or the launches of a summary row
    )
    total = instances["group_ns"].sum() or 1
    table = (
        instances.group_by("op", "signature")
        .agg(
            pl.col("occurrences").sum().alias("instances"),
            pl.col("kernel_count").first().alias("kernels_per_instance"),
            pl.col("group_ns").sum().alias("total_ns"),
        )
    )
    kernel_names = pl.Series("kernels", [" + ".join(label_of[i] for i in ids if i is not None)
                              for ids in table["signature"].to_list()],
                             dtype=pl.String)
    return (
        table.select("op", kernel_names, "instances", "kernels_per_instance", "total_ns")
        .with_columns((pl.col("total_ns") / pl.col("instances")).alias("per_instance_ns"))
        .with_columns((100.0 * pl.col("total_ns") / total).alias("time_pct"))
        .sort(["total_ns", "op", "kernels"], descending=[True, False, False])  # ties in a fixed order
    )
