"""What the ops inside a fused op recorded, for cost rules that ask (`inner = true` in data/cost_models.toml).

A fused mixture-of-experts op such as vLLM's `moe_forward(hidden [T, H], router_logits [T, E], layer)` names
neither the experts' weights nor top-k. The ops it runs inside do: the routing op's k (`TopK(logits, k, …)`,
`aten::topk(x, k)`) and views of the experts' weights, 3-D tensors whose first dimension is E. The first such
weight is the gate/up projection (one of its dimensions, times the packing of its element type, is H: its
columns are the other one), the second the down projection (one of its dimensions is H: its rows are the other,
times the same packing). Weights stored as bytes may pack two 4-bit values each (MXFP4): the packing is the
factor 1 or 2 that makes a dimension equal H. Only what is found is given; a rule needing more does not apply.
"""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl

_TOPK = re.compile(r"(?i)(^|::)_?topk|top_k")


def inner_summary(hidden: list[int], experts: int, inner: list[tuple[str, str | None, str | None, str | None]]
                  ) -> str | None:
    """JSON of what `inner` ops (name, input dims, input types, scalars; in call order) show of a fused MoE op whose
    hidden states are `hidden` ([T, H]) and whose router has `experts` outputs; None when nothing is found."""
    if not isinstance(hidden, list) or len(hidden) != 2 or not all(isinstance(x, int) for x in hidden) or experts <= 0:
        return None
    h = hidden[1]
    found: dict[str, float | str] = {}
    weights: list[tuple[list[int], str]] = []
    for name, dims_text, types_text, concrete_text in inner:
        dims, types, concrete = _json(dims_text), _json(types_text), _json(concrete_text)
        if "top_k" not in found and _TOPK.search(name) and len(concrete) > 1:
            try:
                k = int(float(concrete[1]))
            except (TypeError, ValueError, OverflowError):
                k = 0
            if 0 < k <= experts:
                found["top_k"] = k
        for i, shape in enumerate(dims):
            if isinstance(shape, list) and len(shape) == 3 and shape[0] == experts and all(
                    isinstance(x, int) for x in shape):
                dtype = types[i] if i < len(types) else ""
                if (shape, dtype) not in weights:
                    weights.append((shape, dtype))
    if len(weights) >= 2:
        (up, up_type), (down, _) = weights[0], weights[1]
        packing = _packing(up, up_type, h)
        if packing:
            up_n = up[2] if up[1] * packing == h else up[1]
            down_k = (down[1] if down[2] == h else down[2]) * packing
            from kernelscope.analyze.costs.op_inputs import DTYPE_BYTES

            size = sum(int(np.prod(w)) * DTYPE_BYTES.get(t, 2) for w, t in weights[:2])
            found.update(up_n=up_n, down_k=down_k, expert_bytes=size / experts)
            found["weight_format"] = "4-bit" if packing == 2 else _short(up_type)
    return json.dumps(found, sort_keys=True) if found else None


def _short(dtype: str) -> str:
    from kernelscope.analyze.costs.gemm_shape import SHORT_DTYPES

    return SHORT_DTYPES.get(dtype, dtype or "?")


def _packing(shape: list[int], dtype: str, hidden: int) -> int | None:
    packs = (1, 2) if dtype == "unsigned char" else (1,)
    for p in packs:
        if shape[1] * p == hidden or shape[2] * p == hidden:
            return p
    return None


def _json(text: str | None) -> list:
    try:
        value = json.loads(text) if text else []
    except (ValueError, RecursionError):
        return []
    return value if isinstance(value, list) else []


def inner_summaries(ops: pl.DataFrame, op_ids: list[int]) -> dict[int, str]:
    """inner_summary of each op in `op_ids` (rows of `ops`: CPU ops with op_id, pid, tid, start_ns, dur_ns, name,
    input_dims, input_types, concrete_inputs), from the ops its call holds on its thread."""
    out: dict[int, str] = {}
    if not op_ids:
        return out
    cpu = ops.filter(pl.col("cat") == "cpu_op").select(
        "op_id", "pid", "tid", "start_ns", "dur_ns", "name",
        *(pl.col(c).cast(pl.String) for c in ("input_dims", "input_types", "concrete_inputs")))
    wanted = cpu.filter(pl.col("op_id").is_in(op_ids))
    threads = wanted.select("pid", "tid").unique()
    cpu = cpu.join(threads, on=["pid", "tid"], how="semi").sort("pid", "tid", "start_ns")
    by_thread = {key: frame for key, frame in cpu.group_by(["pid", "tid"], maintain_order=True)}
    for row in wanted.iter_rows(named=True):
        dims = _json(row["input_dims"])
        if len(dims) < 2 or not isinstance(dims[1], list) or not dims[1] or not isinstance(dims[1][-1], int):
            continue
        frame = by_thread[(row["pid"], row["tid"])]
        starts = frame["start_ns"].to_numpy()
        lo = int(np.searchsorted(starts, row["start_ns"], "left"))
        hi = int(np.searchsorted(starts, row["start_ns"] + row["dur_ns"], "left"))
        inside = frame[lo:hi].filter(pl.col("op_id") != row["op_id"])
        summary = inner_summary(dims[0], int(dims[1][-1]), list(inside.select(
            "name", "input_dims", "input_types", "concrete_inputs").iter_rows()))
        if summary:
            out[row["op_id"]] = summary
    return out
