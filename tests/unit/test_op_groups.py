"""Op groups against a plain-Python grouping of a real trace's kernels: per outermost op instance, its kernels in
launch order make the signature; instances, kernels per instance and time sum per signature."""

from collections import defaultdict

import polars as pl

from kernelscope.analyze.attribution.attribution import attribute
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


def _expected_without_ops(kernels: pl.DataFrame) -> dict[str, tuple[int, int, int]]:
    """kernels → (instances, kernels per instance, total ns) when no kernel has an outermost op: in time order, a
    kernel joins the one before it when it is a follower (a split-K reduction, a combine step, a second stage) on the
    same stream of the same rank."""
    import re

    follows = re.compile(r"splitKreduce|splitkv_combine|_combine_kernel|[Ss]tage_?2|stage2")
    rows = sorted(kernels.filter(pl.col("kind") == "kernel").iter_rows(named=True), key=lambda r: r["start_ns"])
    groups: list[list[dict]] = []
    for row in rows:
        follower = bool(follows.search(row["name"])) or row["category"] == "attention-combine"
        before = groups[-1][-1] if groups else None
        if follower and before is not None and (before["stream"], before["rank"]) == (row["stream"], row["rank"]):
            groups[-1].append(row)
        else:
            groups.append([row])
    out: dict[str, list[int]] = {}
    for group in groups:
        key = " + ".join(r["friendly_name"] or r["name"] for r in group)
        entry = out.setdefault(key, [0, len(group), 0])
        entry[0] += 1
        entry[2] += sum(r["dur_ns"] for r in group)
    return {key: tuple(value) for key, value in out.items()}


def test_without_framework_ops_followers_join_the_kernel_before_them(qwen_gpu_trace):
    """A trace without CPU ops (an nsys export, a kernel-only capture): the split-K reductions of this real trace's
    cuBLAS GEMMs join their GEMM."""
    kernels, _ops = attribute(load_kineto(qwen_gpu_trace))
    bare = kernels.with_columns(pl.lit(None, dtype=pl.Int64).alias("top_op_id"),
                                pl.lit(None, dtype=pl.String).alias("top_op"))
    expected = _expected_without_ops(bare)
    assert any(" + " in key for key in expected)  # some kernels were followers
    got = {r["kernels"]: (r["instances"], r["kernels_per_instance"], r["total_ns"])
           for r in op_group_table(bare).iter_rows(named=True)}
    assert got == expected


def test_given_labels_each_kernel_is_spelled_by_its_names_label(qwen_gpu_trace):
    """With the report's labels (one per name), signatures spell each kernel by its name's label, or its name where
    the label is missing; the groups are those of the names."""
    kernels, _ops = attribute(load_kineto(qwen_gpu_trace))
    decode = kernels.filter(pl.col("phase") == "decode")
    names = sorted(decode["name"].unique().to_list())
    spelled = {name: (f"kernel {i}" if i % 2 == 0 else None) for i, name in enumerate(names)}
    labels = pl.DataFrame({"name": list(spelled), "label": list(spelled.values())},
                          schema={"name": pl.String, "label": pl.String})
    relabelled = {}
    for (op, signature), value in _expected(decode).items():
        parts = [spelled[name] or name for name in signature.split(" + ")]
        relabelled[(op, " + ".join(parts))] = value
    table = op_group_table(decode, labels).filter(pl.col("op") != "(no framework op)")
    got = {(r["op"], r["kernels"]): (r["instances"], r["kernels_per_instance"], r["total_ns"])
           for r in table.iter_rows(named=True)}
    assert got == relabelled
    assert any("kernel " in key[1] for key in got) and len(got) > 5
