"""Op groups against a plain-Python grouping of a real trace's kernels: per outermost op instance, its kernels in
launch order make the signature; instances, kernels per instance and time sum per signature."""

from collections import defaultdict

import polars as pl

from kernelscope.analyze.attribution import attribute
from kernelscope.analyze.op_groups import op_group_table
from kernelscope.load.kineto import load_kineto


def _expected(kernels: pl.DataFrame) -> dict[tuple[str, str], tuple[int, int, int]]:
    """(op, kernels) → (instances, kernels per instance, total ns), from the rows with an outermost op."""
    instances: dict[int, list[dict]] = defaultdict(list)
    for row in kernels.filter(pl.col("kind") == "kernel").iter_rows(named=True):
        if row["top_op_id"] is not None:
            instances[row["top_op_id"]].append(row)
    out: dict[tuple[str, str], list[int]] = {}
    for rows in instances.values():
        rows.sort(key=lambda r: r["start_ns"])
        key = (rows[0]["top_op"], " + ".join(r["name"] for r in rows))
        entry = out.setdefault(key, [0, len(rows), 0])
        entry[0] += 1
        entry[2] += sum(r["dur_ns"] for r in rows)
    return {key: tuple(value) for key, value in out.items()}


def test_op_groups_match_a_plain_grouping_of_the_trace(qwen_gpu_trace):
    kernels, _ops = attribute(load_kineto(qwen_gpu_trace))
    for phase in ("prefill", "decode"):
        subset = kernels.filter(pl.col("phase") == phase)
        expected = _expected(subset)
        assert len(expected) > 5
        table = op_group_table(subset).filter(pl.col("op") != "(no framework op)")
        got = {(r["op"], r["kernels"]): (r["instances"], r["kernels_per_instance"], r["total_ns"])
               for r in table.iter_rows(named=True)}
        assert got == expected
        # several instances share a signature: the grouping is by signature, not by instance
        assert max(v[0] for v in expected.values()) > 1
