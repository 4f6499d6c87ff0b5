"""Analytic costs of matrix products and convolutions: 2·M·N·K FLOPs (bias adds not counted, as
torch.utils.flop_counter), each operand read once and the output written once (docs/roofline.md)."""

from __future__ import annotations

import json
import math

from kernelscope.analyze.costs.gemm_shape import SHORT_DTYPES, GemmShape
from kernelscope.analyze.costs.op_inputs import (
    DTYPE_BYTES,
    Args,
    OpCost,
    Tensor,
    matrix_precision,
    tensor_inputs,
)

# ---- matrix products -------------------------------------------------------------------------------------


def gemm_cost(m: int, n: int, k: int, batch: int, a: Tensor, b: Tensor, extra: int = 0) -> OpCost:
    out_bytes = batch * m * n * DTYPE_BYTES.get(a.dtype, 2) if a.dtype not in ("signed char",) else batch * m * n * 4
    out = SHORT_DTYPES.get(a.dtype, "?") if a.dtype != "signed char" else "int32"
    if a.dtype.startswith("c10::Float8"):
        out_bytes, out = batch * m * n * 2, "bf16"  # fp8 GEMMs write bf16/fp16
    shape = GemmShape(m, n, k, batch, f"{SHORT_DTYPES.get(a.dtype, '?')}×{SHORT_DTYPES.get(b.dtype, '?')}→{out}")
    return OpCost(2.0 * batch * m * n * k, float(a.nbytes + b.nbytes + out_bytes + extra), matrix_precision(a),
                  "gemm", (shape,))


def mm(args: Args, concrete: list[str]) -> OpCost | None:
    a, b = tensor_inputs(args)[:2]
    if len(a.shape) != 2 or len(b.shape) != 2:
        return None
    return gemm_cost(a.shape[0], b.shape[1], a.shape[1], 1, a, b)


def addmm(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    if len(t) < 3:
        return None
    bias, a, b = t[:3]
    return gemm_cost(a.shape[0], b.shape[1], a.shape[1], 1, a, b, extra=bias.nbytes)


def bmm(args: Args, concrete: list[str]) -> OpCost | None:
    a, b = tensor_inputs(args)[:2]
    if len(a.shape) != 3 or len(b.shape) != 3:
        return None
    return gemm_cost(a.shape[1], b.shape[2], a.shape[2], a.shape[0], a, b)


def baddbmm(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    if len(t) < 3:
        return None
    c, a, b = t[:3]
    return gemm_cost(a.shape[1], b.shape[2], a.shape[2], a.shape[0], a, b, extra=c.nbytes)


def linear(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    x, w = t[:2]
    if not x.shape or len(w.shape) != 2:
        return None
    m = math.prod(x.shape[:-1])
    return gemm_cost(m, w.shape[0], x.shape[-1], 1, x, w, extra=t[2].nbytes if len(t) > 2 else 0)


def scaled_mm(args: Args, concrete: list[str]) -> OpCost | None:
    """(a [M, K], b [K, N], scale_a, scale_b, bias, scale_result, out_dtype, …): the scales are read too."""
    t = tensor_inputs(args)
    a, b = t[:2]
    scales = sum(x.nbytes for x in args[2:4] if isinstance(x, Tensor))
    return gemm_cost(a.shape[0], b.shape[1], a.shape[1], 1, a, b, extra=scales)


def grouped_mm(args: Args, concrete: list[str]) -> OpCost | None:
    """MoE grouped GEMM: tokens [T, K] × experts [E, K, N] (rows routed to experts by offsets). The experts
    actually read are unknown; at most min(E, T) of them hold tokens, which is what is counted."""
    t = tensor_inputs(args)
    a, b = t[:2]
    if len(a.shape) == 2 and len(b.shape) == 3:
        tokens, k = a.shape
        experts, _, n = b.shape
        touched = min(experts, tokens)
        weight_bytes = touched * k * n * DTYPE_BYTES.get(b.dtype, 2)
        out_bytes = tokens * n * DTYPE_BYTES.get(a.dtype, 2)
        shape = GemmShape(tokens, n, k, 1, f"{SHORT_DTYPES.get(a.dtype, '?')}×{SHORT_DTYPES.get(b.dtype, '?')}"
                          f"→{SHORT_DTYPES.get(a.dtype, '?')}")
        return OpCost(2.0 * tokens * k * n, float(a.nbytes + weight_bytes + out_bytes), matrix_precision(a),
                      "grouped_gemm", (shape,))
    if len(a.shape) == 3 and len(b.shape) == 3:  # batched groups
        return bmm(args, concrete)
    return None


def convolution(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    if len(t) < 2 or len(t[0].shape) < 3:
        return None
    x, w = t[:2]
    spatial = len(x.shape) - 2
    stride = int_list(concrete, 3, spatial, 1)
    padding = int_list(concrete, 4, spatial, 0)
    dilation = int_list(concrete, 5, spatial, 1)
    groups = int(concrete[8]) if len(concrete) > 8 and concrete[8].isdigit() else 1
    out_spatial = [
        (x.shape[2 + i] + 2 * padding[i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
        for i in range(spatial)
    ]
    n, out_c = x.shape[0], w.shape[0]
    kernel = math.prod(w.shape[1:])  # (C / groups) · kernel size
    out_numel = n * out_c * math.prod(out_spatial)
    flops = 2.0 * out_numel * kernel
    out_bytes = out_numel * DTYPE_BYTES.get(x.dtype, 2)
    del groups  # already folded into the weight's shape
    return OpCost(flops, float(x.nbytes + w.nbytes + out_bytes), matrix_precision(x), "convolution")


def int_list(concrete: list[str], at: int, n: int, default: int) -> list[int]:
    try:
        values = json.loads(concrete[at]) if at < len(concrete) and concrete[at] else None
    except json.JSONDecodeError:
        values = None
    if isinstance(values, list) and len(values) >= n:
        return [int(v) for v in values[:n]]
    return [default] * n
