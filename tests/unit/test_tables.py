import math
import statistics

import polars as pl
import pytest

from kernelscope.analyze.kernel_stats import kernel_summary
from kernelscope.analyze.structure.layers import layer_breakdown, layer_type_totals, per_layer_times
from kernelscope.analyze.structure.phases import phase_table
from kernelscope.contracts.tables import conform_kernels


def kernels(rows):
    cols = ["name", "phase", "step", "module", "layer", "dur_ns", "start_ns"]
    df = pl.DataFrame(rows, schema=cols, orient="row")
    return conform_kernels(df.with_columns(pl.lit("kernel").alias("kind")))


ROWS = [
    # decode step 0 and 1, two layers of type A (0, 1) and one of type B (2)
    ("gemv", "decode", 0, "model.layers.0.mlp.down_proj", 0, 100, 1),
    ("gemv", "decode", 0, "model.layers.1.mlp.down_proj", 1, 120, 2),
    ("gemv", "decode", 0, "model.layers.2.mlp.experts", 2, 300, 3),
    ("add", "decode", 0, "model.layers.0", 0, 10, 4),
    ("gemv", "decode", 1, "model.layers.0.mlp.down_proj", 0, 110, 5),
    ("gemv", "decode", 1, "model.layers.1.mlp.down_proj", 1, 130, 6),
    ("gemv", "decode", 1, "model.layers.2.mlp.experts", 2, 310, 7),
    ("argmax", "decode", 1, "generate", None, 5, 8),
    ("gemm", "prefill", None, "model.layers.0.mlp.down_proj", 0, 1000, 0),
]
TYPES = {0: "A", 1: "A", 2: "B"}


def test_kernel_summary_matches_nsys_definitions():
    durations = [100, 120, 110, 130]
    table = kernel_summary(kernels(ROWS).filter(pl.col("module").str.ends_with("down_proj")), by=["phase"])
    row = table.filter((pl.col("phase") == "decode") & (pl.col("name") == "gemv")).row(0, named=True)
    assert row["instances"] == 4 and row["total_ns"] == sum(durations)
    assert row["avg_ns"] == statistics.mean(durations) and row["med_ns"] == statistics.median(durations)
    assert row["stddev_ns"] == pytest.approx(statistics.stdev(durations))
    assert (row["min_ns"], row["max_ns"], row["time_pct"]) == (100, 130, 100.0)
    single = table.filter(pl.col("phase") == "prefill").row(0, named=True)
    assert single["stddev_ns"] == 0.0


def test_time_pct_sums_to_100_per_phase():
    table = kernel_summary(kernels(ROWS), by=["phase"])
    for _, group in table.group_by("phase"):
        assert math.isclose(group["time_pct"].sum(), 100.0)


def test_phase_table_counts_steps():
    table = phase_table(kernels(ROWS))
    assert table["phase"].to_list() == ["prefill", "decode"]
    decode = table.row(1, named=True)
    assert decode["steps"] == 2 and decode["kernel_count"] == 8
    assert decode["device_time_per_step_ns"] == sum(r[5] for r in ROWS if r[1] == "decode") / 2


def test_layer_breakdown_per_layer_per_step():
    k = kernels(ROWS).filter(pl.col("phase") == "decode")
    table = layer_breakdown(k, TYPES, {"decode": 2})
    row = table.filter((pl.col("layer_type") == "A") & (pl.col("layer_module") == "mlp.down_proj")).row(0, named=True)
    assert row["per_layer_step_ns"] == (100 + 120 + 110 + 130) / (2 * 2) and row["layers"] == 2
    assert row["launches_per_layer_step"] == 1.0
    b = table.filter(pl.col("layer_type") == "B").row(0, named=True)
    assert (b["per_layer_step_ns"], b["layer_module"]) == ((300 + 310) / 2, "mlp.experts")
    itself = table.filter(pl.col("layer_module") == "(layer)").row(0, named=True)
    assert itself["per_layer_step_ns"] == 10 / 4
    outside = table.filter(pl.col("layer_type") == "outside layers").row(0, named=True)
    assert (outside["layer_module"], outside["per_layer_step_ns"]) == ("generate", 2.5)
    totals = layer_type_totals(table)
    a = totals.filter(pl.col("layer_type") == "A").row(0, named=True)
    assert a["per_step_ns"] == (100 + 120 + 110 + 130 + 10) / 2
    assert math.isclose(totals["time_pct"].sum(), 100.0)
    per_layer = per_layer_times(k, TYPES, {"decode": 2})
    assert per_layer["per_step_ns"].to_list() == [(100 + 10 + 110) / 2, (120 + 130) / 2, (300 + 310) / 2]


def test_busy_time_is_the_union_of_kernel_intervals():
    from kernelscope.analyze.structure.phases import busy_ns

    # [0,10) and [5,20) overlap → 20; [30,35) alone → 5; a second device counts on its own.
    df = pl.DataFrame({"device": [0, 0, 0, 1], "start_ns": [0, 5, 30, 0], "dur_ns": [10, 15, 5, 7]})
    assert busy_ns(df) == 20 + 5 + 7


def test_busy_time_does_not_depend_on_row_order():
    from kernelscope.analyze.structure.phases import busy_ns

    # The same intervals as above, rows shuffled (a table not kept in time order): the union is unchanged.
    df = pl.DataFrame({"device": [0, 1, 0, 0], "start_ns": [30, 0, 5, 0], "dur_ns": [5, 7, 15, 10]})
    assert busy_ns(df) == 20 + 5 + 7
    # one interval inside another, listed first
    assert busy_ns(pl.DataFrame({"device": [0, 0], "start_ns": [10, 0], "dur_ns": [2, 100]})) == 100


@pytest.mark.parametrize("column", ["category", "library"])
def test_kernel_mix_of_a_real_run_matches_its_rows(column):
    """Each phase's mix by category and by library, against the run's kernel rows summed in plain Python: distinct
    names, launches (summary rows count their instances), device time and share."""
    from collections import defaultdict
    from pathlib import Path

    from kernelscope.analyze.mix import mix_tables
    from kernelscope.analyze.report_tables import report_kernels
    from kernelscope.load.rundir import read_run

    run = read_run(Path(__file__).parent.parent / "data" / "runs" / "h200-qwen2-1.5b-slim")
    table = report_kernels(run)
    for phase in table["phase"].unique().to_list():
        subset = table.filter(pl.col("phase") == phase)
        names, launches, total = defaultdict(set), defaultdict(int), defaultdict(int)
        for row in subset.select(column, "name", "instances", "dur_ns").iter_rows():
            names[row[0]].add(row[1])
            launches[row[0]] += row[2] or 1
            total[row[0]] += row[3]
        mix = mix_tables(subset, ("category", "library"))[column]
        assert mix[column].to_list() == sorted(total, key=lambda value: (-total[value], value))
        phase_time = sum(total.values())
        for row in mix.iter_rows(named=True):
            value = row[column]
            assert (row["kernels"], row["launches"], row["total_ns"]) == (len(names[value]), launches[value],
                                                                          total[value])
            assert row["time_pct"] == pytest.approx(100.0 * total[value] / phase_time)
        assert len(names) == mix.height > 1


def test_kernel_mix_breaks_ties_by_name():
    """Categories of equal device time come in name order, so the same run gives the same table every time (a
    group-by's order is not fixed: eight tied categories came out in a different order from run to run)."""
    from kernelscope.analyze.mix import mix_tables

    categories = [f"category-{i}" for i in (5, 2, 7, 0, 3, 6, 1, 4)]
    kernels = pl.DataFrame({"category": categories, "library": ["lib"] * 8, "name": [f"k{i}" for i in range(8)],
                            "dur_ns": [1000] * 8, "instances": [None] * 8}, schema_overrides={"instances": pl.Int64})
    for _ in range(5):
        assert mix_tables(kernels, ("category", "library"))["category"]["category"].to_list() == sorted(categories)


def test_gpu_busy_of_several_ranks_is_each_gpu_share_of_the_span():
    """Two ranks of a real training run imported together (HTA's sampled ranks, each on its own GPU): busy time is
    each rank's union of kernel intervals, summed; GPU busy is that over the span times the GPUs (at most 100%),
    and the mean gap the idle time left over the GPUs per kernel (never negative). Computed from the rows in plain
    Python."""
    from pathlib import Path

    from kernelscope.analyze.attribution.attribution import attribute
    from kernelscope.analyze.ranks.ranks import combine_ranks
    from kernelscope.load.sources import read_trace

    public = Path(__file__).parent.parent / "data" / "public" / "hta"
    parts = [attribute(read_trace(public / f"data__trace_filter__sampled_rank-{i}.json.gz")) for i in (0, 1)]
    kernels, _ = combine_ranks(parts)
    for phase, rows in kernels.filter(pl.col("start_ns").is_not_null()).partition_by("phase", as_dict=True).items():
        busy, lanes = 0, set()
        for (rank, device), lane in rows.partition_by("rank", "device", as_dict=True).items():
            lanes.add((rank, device))
            reach = None
            for start, dur in sorted(zip(lane["start_ns"].to_list(), lane["dur_ns"].to_list(), strict=True)):
                end = start + dur
                if reach is None or start > reach:
                    busy += end - start
                    reach = end
                elif end > reach:
                    busy += end - reach
                    reach = end
        span = max(s + d for s, d in zip(rows["start_ns"], rows["dur_ns"], strict=True)) - rows["start_ns"].min()
        row = phase_table(kernels).filter(pl.col("phase") == phase[0]).row(0, named=True)
        assert len(lanes) == 2 and row["busy_ns"] == busy
        assert row["busy_pct"] == pytest.approx(100.0 * busy / (span * 2)) and row["busy_pct"] <= 100.0
        assert row["mean_gap_ns"] == pytest.approx((span * 2 - busy) / row["kernel_count"]) and row["mean_gap_ns"] >= 0


def test_phase_table_is_the_same_whether_each_phases_rows_lie_together_or_not(qwen_gpu_trace):
    """A run in time order holds each phase's rows together (taken as slices); rows of phases that interleave are
    gathered per phase instead. Both give the same table: busy time, lanes, gaps, steps, spans."""
    from kernelscope.analyze.attribution.attribution import attribute
    from kernelscope.load.kineto import load_kineto

    kernels, _ = attribute(load_kineto(qwen_gpu_trace))
    ordered = kernels.sort("start_ns")
    phases = ordered["phase"]
    assert phases.filter(phases.ne_missing(phases.shift(1))).is_unique().all()  # each phase in one stretch
    interleaved = ordered.with_row_index("_i").sort(pl.col("_i") % 3, "_i").drop("_i")
    mixed = interleaved["phase"]
    assert not mixed.filter(mixed.ne_missing(mixed.shift(1))).is_unique().all()  # phases come back
    assert phase_table(interleaved).equals(phase_table(ordered))
    assert phase_table(ordered)["busy_ns"].min() > 0
