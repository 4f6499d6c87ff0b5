"""NVTX ranges that are framework ops, not annotations: what `torch.autograd.profiler.emit_nvtx()` (and
`nsys profile --pytorch=autograd-nvtx`) pushes for every op PyTorch runs.

Their text is the op's name, then `, seq = <autograd sequence number>` (ops that take part in autograd), `, op_id =
<id>` (recent torch), `, sizes = [[…], …]` (with record_shapes) and `, input_op_ids = […]`: `aten::mul, seq = 12,
op_id = 34, sizes = [[2, 3], [2, 3]]`; backward functions likewise (`MulBackward0, seq = 12, op_id = 99`). Such a
range becomes a CPU op (cat `cpu_op`) named by the op alone, with its sequence number and shapes, so that
attribution gives kernels their framework op from it and no range of an op is taken for a module. Where an export
holds such ranges, ranges named like an op (`aten::empty`, which has no sequence number) are ops too.
"""

from __future__ import annotations

import polars as pl

_EMIT_NVTX = (r"^(?P<op>[^,]+?)(?:, seq = (?P<seq>-?\d+))?(?:, op_id = (?P<op_id>\d+))?"
              r"(?:, sizes = (?P<sizes>\[.*?\]))?(?:, input_op_ids = .*)?$")
_MARKED = r", (?:seq|op_id) = \d"
_OP_NAME = r"^(?:aten|prim|c10d|_c10d_functional|torchvision|quantized|cuda|triton|_?inductor)::\w+$"


def with_framework_ops(ranges: pl.DataFrame) -> pl.DataFrame:
    """ranges: NVTX ranges (name, …) → the same rows with `cat` (`cpu_op` for framework ops, `annotation` for the
    rest), and for ops the bare op name, `sequence_number` and `input_dims` (the sizes as JSON text)."""
    annotation = pl.lit("annotation").alias("cat")
    if ranges.height == 0 or not ranges["name"].str.contains(_MARKED).any():
        return ranges.with_columns(annotation)
    parts = ranges["name"].str.extract_groups(_EMIT_NVTX)
    marked = pl.col("name").str.contains(_MARKED)
    is_op = marked | pl.col("name").str.contains(_OP_NAME)
    return ranges.with_columns(parts.alias("_p")).with_columns(
        pl.when(is_op).then(pl.lit("cpu_op")).otherwise(pl.lit("annotation")).alias("cat"),
        pl.when(marked).then(pl.col("_p").struct.field("op")).otherwise(pl.col("name")).alias("name"),
        pl.when(marked).then(pl.col("_p").struct.field("seq").cast(pl.Int64, strict=False))
        .alias("sequence_number"),
        pl.when(marked).then(pl.col("_p").struct.field("sizes")).alias("input_dims"),
    ).drop("_p")
