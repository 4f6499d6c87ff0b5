"""The bytes of an advanced-indexing op (`aten::index`), estimated from the op that consumes its result.

The profiler records an index op's source tensor but not its index tensors (a list of optional tensors) nor its
result, so how much of the source it gathered is not in the op itself: a MoE layer indexing 8 of 256 experts'
weights reads 3% of them. Eager code uses the gathered tensor at once: the first op after it on its thread (among
the next few, once it has ended) with an input of the source's trailing dimensions, `[n, a, b]` for a source
`[E, a, b]`, holds the result, of any number of rows (fewer: 8 of 256 experts' weights; as many: the experts a
decode step's tokens chose, repeats included; more: a MoE's tokens repeated for each expert they go to). Its cost, labelled `estimated`: n rows read and written, and the n indices read.
Where no such consumer follows, the op stays without a cost.
"""

from __future__ import annotations

import json

import polars as pl

from kernelscope.analyze.costs.op_inputs import DTYPE_BYTES, OpCost

INDEX_OP = "aten::index"
_LOOKAHEAD = 16  # ops after the index op on its thread that may consume its result


def index_estimates(ops: pl.DataFrame, op_ids: list[int]) -> dict[int, OpCost]:
    """op_id → estimated cost, for the `aten::index` ops among `op_ids` whose result a following op shows."""
    if not op_ids or not ops.height:
        return {}
    cpu = (ops.filter(pl.col("cat") == "cpu_op")
           .select("op_id", "pid", "tid", "start_ns", "dur_ns", "name", pl.col("input_dims").cast(pl.String),
                   pl.col("input_types").cast(pl.String))
           .sort("pid", "tid", "start_ns"))
    cpu = cpu.with_row_index("_pos")
    targets = cpu.filter(pl.col("op_id").is_in(op_ids) & (pl.col("name") == INDEX_OP))
    out: dict[int, OpCost] = {}
    for pos, op_id, pid, tid, start, dur, _, dims, types in targets.rows():
        source, dtype = _first_tensor(dims, types)
        if source is None or len(source) < 2:
            continue
        following = cpu.slice(pos + 1, 4 * _LOOKAHEAD).filter(
            (pl.col("pid") == pid) & (pl.col("tid") == tid) & (pl.col("start_ns") >= start + dur)).head(_LOOKAHEAD)
        n = _consumer_rows(source, following["input_dims"].to_list())
        if n is None:
            continue
        row_bytes = DTYPE_BYTES.get(dtype, 2)
        for d in source[1:]:
            row_bytes *= d
        out[op_id] = OpCost(0.0, float(2 * n * row_bytes + 8 * n), "fp32", "gather")
    return out


def _first_tensor(dims: str | None, types: str | None) -> tuple[list[int] | None, str]:
    try:
        shapes, names = json.loads(dims or "[]"), json.loads(types or "[]")
    except (ValueError, RecursionError):
        return None, ""
    if not shapes or not isinstance(shapes[0], list) or not all(isinstance(x, int) for x in shapes[0]):
        return None, ""
    return shapes[0], names[0] if names and isinstance(names[0], str) else ""


def _consumer_rows(source: list[int], following: list[str | None]) -> int | None:
    tail = source[1:]
    for dims in following:
        try:
            shapes = json.loads(dims or "[]")
        except (ValueError, RecursionError):
            continue
        for shape in shapes:
            if (isinstance(shape, list) and len(shape) == len(source) and shape[1:] == tail
                    and isinstance(shape[0], int) and shape[0] > 0):
                return shape[0]
    return None
