"""The report's tables list rows of equal time in a fixed order (by name), so one run always gives the same
files. The prefill of the Qwen2 trace has kernels and op groups of equal time."""

import polars as pl

from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.analyze.costs.kernel_costs import kernel_costs
from kernelscope.analyze.costs.roofline import kernel_points, place_on_roofline
from kernelscope.analyze.hardware import ceilings_for
from kernelscope.analyze.op_groups import op_group_table
from kernelscope.load.kineto import load_kineto


def _prefill(trace):
    kernels, ops = attribute(load_kineto(trace))
    return kernel_costs(kernels, ops).filter(pl.col("phase") == "prefill")


def test_roofline_points_of_equal_time_are_listed_by_name(qwen_gpu_trace):
    points = kernel_points(place_on_roofline(_prefill(qwen_gpu_trace), ceilings_for("NVIDIA H200")), "cost_model")
    rows = list(zip(points["dur_ns"].to_list(), points["name"].to_list(), strict=True))
    assert len(set(d for d, _ in rows)) < len(rows)  # the trace has ties: the order below is not the time's alone
    assert rows == sorted(rows, key=lambda row: (-row[0], row[1]))


def test_op_groups_of_equal_time_are_listed_by_op_and_kernels(qwen_gpu_trace):
    groups = op_group_table(_prefill(qwen_gpu_trace))
    rows = list(zip(groups["total_ns"].to_list(), groups["op"].to_list(), groups["kernels"].to_list(), strict=True))
    assert len(set(t for t, _, _ in rows)) < len(rows)
    assert rows == sorted(rows, key=lambda row: (-row[0], row[1], row[2]))
