"""Analytic cost of framework ops from the shapes and dtypes in the trace: FLOPs and the minimum bytes moved
(each input read once, each output written once), and which compute roof applies (`precision`).

Conventions (also in docs/roofline.md):
- GEMM family: 2·M·N·K FLOPs (bias adds not counted, as torch.utils.flop_counter).
- Attention: 2·(D + Dv) FLOPs per query-key pair per head; causal prefill counts only the pairs it computes.
- Pointwise ops: one FLOP per output element (0 for copies, casts and fills); reductions: one per input element;
  softmax 5, layer norm 8, RMS norm 4 per element.
- Data movement ops (cat, index, gather, embedding, …): 0 FLOPs; bytes read plus bytes written.
Each model is one small function; MODELS maps op names to them. Which kernels an op's cost goes to is
analyze/costs/kernel_costs.py's job.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache

from kernelscope.analyze.costs.matmul_costs import (
    addmm,
    baddbmm,
    bmm,
    convolution,
    grouped_mm,
    linear,
    mm,
    scaled_mm,
)
from kernelscope.analyze.costs.op_inputs import (
    DTYPE_BYTES,
    Args,
    Model,
    OpCost,
    broadcast,
    matrix_precision,
    parse_inputs,
    tensor_inputs,
)

# ---- attention -------------------------------------------------------------------------------------------

# Where is_causal sits among each op's arguments, and whether q/k/v are [B, H, L, D] or [B, L, H, D].
ATTENTION_SIGNATURES = {
    "aten::scaled_dot_product_attention": (5, "bhld"),
    "aten::_scaled_dot_product_flash_attention": (4, "bhld"),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (4, "bhld"),
    "aten::_scaled_dot_product_efficient_attention": (6, "bhld"),
    "aten::_scaled_dot_product_cudnn_attention": (6, "bhld"),
    "aten::_cudnn_attention_forward": (10, "bhld"),
    "aten::_flash_attention_forward": (8, "blhd"),
    "aten::_efficient_attention_forward": (9, "blhd"),  # custom_mask_type: 1 = causal
}


def _attention_for(name: str) -> Model:
    causal_at, layout = ATTENTION_SIGNATURES[name]

    def model(args: Args, concrete: list[str]) -> OpCost | None:
        t = tensor_inputs(args)
        if len(t) < 3 or any(len(x.shape) != 4 for x in t[:3]):
            return None
        q, k, v = t[:3]
        if layout == "bhld":
            (b, hq, lq, d), (_, _, lk, _), dv = q.shape, k.shape, v.shape[3]
        else:
            (b, lq, hq, d), (_, lk, _, _), dv = q.shape, k.shape, v.shape[3]
        flag = concrete[causal_at] if causal_at < len(concrete) else ""
        causal = flag in ("True", "1") and lq > 1
        # Causal attention aligned to the bottom right: query i sees lk - lq + i + 1 keys.
        pairs = lq * lk - (lq * (lq - 1)) / 2 if causal and lk >= lq else float(lq * lk)
        flops = 2.0 * b * hq * pairs * (d + dv)
        out = b * hq * lq * dv * DTYPE_BYTES.get(q.dtype, 2)
        return OpCost(flops, float(q.nbytes + k.nbytes + v.nbytes + out), matrix_precision(q), "attention")

    return model


# ---- pointwise, reductions, normalisation ------------------------------------------------------------------

POINTWISE_FLOPS = {  # FLOPs per output element; 0 for pure data movement
    "add": 1, "sub": 1, "mul": 1, "div": 1, "neg": 1, "rsqrt": 1, "sqrt": 1, "pow": 1, "exp": 1, "log": 1,
    "silu": 1, "gelu": 1, "relu": 1, "sigmoid": 1, "tanh": 1, "sin": 1, "cos": 1, "where": 1, "masked_fill": 1,
    "clamp": 1, "clamp_min": 1, "clamp_max": 1, "eq": 1, "ne": 1, "lt": 1, "gt": 1, "ge": 1, "le": 1,
    "bitwise_not": 1, "bitwise_and": 1, "bitwise_or": 1, "bitwise_xor": 1, "logical_not": 1, "logical_and": 1,
    "logical_or": 1, "abs": 1, "reciprocal": 1, "floor_divide": 1, "remainder": 1, "maximum": 1, "minimum": 1,
    "erf": 1, "exp2": 1, "log1p": 1, "sign": 1, "fmod": 1, "triu": 0, "tril": 0, "lerp": 2, "addcmul": 2, "addcdiv": 2,
    "copy": 0, "_to_copy": 0, "clone": 0, "contiguous": 0, "fill": 0, "zero": 0, "_copy_from": 0,
}
COMPARISONS = {"eq", "ne", "lt", "gt", "ge", "le", "logical_not", "logical_and", "logical_or"}


def _pointwise_for(base: str, inplace: bool) -> Model:
    per_element = POINTWISE_FLOPS[base]

    def model(args: Args, concrete: list[str]) -> OpCost | None:
        tensors = tensor_inputs(args)
        if not tensors:
            return None
        first = tensors[0]
        out_shape = broadcast([t.shape for t in tensors])
        numel = math.prod(out_shape)
        if base in ("copy", "_copy_from"):
            src = tensors[1] if len(tensors) > 1 else first
            return OpCost(0.0, float(src.nbytes + first.nbytes), "fp32", "copy")
        if base in ("fill", "zero"):
            return OpCost(0.0, float(first.nbytes), "fp32", "fill")
        out_size = 1 if base in COMPARISONS else DTYPE_BYTES.get(first.dtype, 4)
        reads = sum(t.nbytes for t in tensors)
        written = first.nbytes if inplace else numel * out_size
        return OpCost(float(per_element * numel), float(reads + written), "fp32", "pointwise")

    return model


REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "any", "all", "norm",
              "linalg_vector_norm", "var", "std", "logsumexp", "cumsum", "cumprod", "count_nonzero"}


def _reduction_for(base: str) -> Model:
    def model(args: Args, concrete: list[str]) -> OpCost | None:
        tensors = tensor_inputs(args)
        if not tensors:
            return None
        x = tensors[0]
        out_numel = _reduced_numel(x.shape, concrete[1] if len(concrete) > 1 else "", base)
        out_bytes = out_numel * (8 if base.startswith("arg") else DTYPE_BYTES.get(x.dtype, 4))
        return OpCost(float(x.numel), float(x.nbytes + out_bytes), "fp32", "reduction")

    return model


def _reduced_numel(shape: tuple[int, ...], dims_text: str, base: str) -> int:
    if base in ("cumsum", "cumprod"):
        return math.prod(shape)
    try:
        dims = json.loads(dims_text) if dims_text else None
    except json.JSONDecodeError:
        dims = None
    if isinstance(dims, int):
        dims = [dims]
    if not dims or not shape:
        return 1 if not dims_text or dims_text == "[]" else math.prod(shape[:-1]) if shape else 1
    keep = [s for i, s in enumerate(shape) if i not in {d % len(shape) for d in dims}]
    return math.prod(keep)


def _per_element(flops: float, model_name: str, weight_inputs: int = 0) -> Model:
    def model(args: Args, concrete: list[str]) -> OpCost | None:
        tensors = tensor_inputs(args)
        if not tensors:
            return None
        x = tensors[0]
        weights = sum(t.nbytes for t in tensors[1 : 1 + weight_inputs])
        return OpCost(flops * x.numel, float(2 * x.nbytes + weights), "fp32", model_name)

    return model


# ---- data movement ---------------------------------------------------------------------------------------


def cat(args: Args, concrete: list[str]) -> OpCost | None:
    parts = args[0] if args and isinstance(args[0], list) else []
    if not parts:
        return None
    # TensorList entries carry no dtype in the trace: assume 2-byte elements unless told otherwise.
    total = sum(math.prod(p.shape) for p in parts) * 2
    return OpCost(0.0, float(2 * total), "fp32", "copy")


def embedding(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    if len(t) < 2:
        return None
    weight, indices = t[:2]
    rows = indices.numel * weight.shape[-1] * DTYPE_BYTES.get(weight.dtype, 2)
    return OpCost(0.0, float(2 * rows + indices.nbytes), "fp32", "gather")


def index_select(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    if len(t) < 2 or not t[0].shape:
        return None
    index = t[-1]
    row = t[0].nbytes // max(t[0].shape[0], 1)  # one slice along the indexed (first) dimension
    return OpCost(0.0, float(2 * index.numel * row + index.nbytes), "fp32", "gather")


def gather(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    if len(t) < 2:
        return None
    src, index = t[0], t[1]
    moved = index.numel * DTYPE_BYTES.get(src.dtype, 4)
    return OpCost(0.0, float(2 * moved + index.nbytes), "fp32", "gather")


def scatter(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    if len(t) < 2:
        return None
    moved = sum(x.nbytes for x in t[1:])
    return OpCost(0.0, float(2 * moved), "fp32", "scatter")


def index(args: Args, concrete: list[str]) -> OpCost | None:
    # The index tensors' shapes are not recorded (a list of optional tensors), so how much of the source is read
    # is unknown: a MoE layer indexing 2 of 256 experts' weights reads 1% of them. No model rather than a guess
    # that can be off by 100×.
    return None


def topk(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    if not t:
        return None
    x = t[0]
    k = int(concrete[1]) if len(concrete) > 1 and concrete[1].lstrip("-").isdigit() else 1
    rows = math.prod(x.shape[:-1]) if x.shape else 1
    out = rows * k * (DTYPE_BYTES.get(x.dtype, 4) + 8)
    return OpCost(float(x.numel), float(x.nbytes + out), "fp32", "topk")


def sort(args: Args, concrete: list[str]) -> OpCost | None:
    t = tensor_inputs(args)
    if not t:
        return None
    x = t[0]
    n = x.shape[-1] if x.shape else 1
    return OpCost(x.numel * max(math.log2(max(n, 2)), 1.0), float(x.nbytes + x.numel * (DTYPE_BYTES.get(x.dtype, 4) + 8)),
                  "fp32", "sort")


# ---- the registry ----------------------------------------------------------------------------------------


def _registry() -> dict[str, Model]:
    models: dict[str, Model] = {
        "aten::mm": mm, "aten::addmm": addmm, "aten::bmm": bmm, "aten::baddbmm": baddbmm,
        "aten::linear": linear, "aten::_scaled_mm": scaled_mm, "aten::_grouped_mm": grouped_mm,
        "aten::_scaled_grouped_mm": grouped_mm,
        "aten::cat": cat, "aten::stack": cat, "aten::embedding": embedding, "aten::index_select": index_select,
        "aten::gather": gather, "aten::index": index, "aten::scatter": scatter, "aten::scatter_": scatter,
        "aten::scatter_add_": scatter, "aten::index_put_": scatter, "aten::_index_put_impl_": scatter,
        "aten::topk": topk, "aten::sort": sort, "aten::argsort": sort,
        "aten::convolution": convolution, "aten::_convolution": convolution, "aten::cudnn_convolution": convolution,
        "aten::_softmax": _per_element(5, "softmax"), "aten::softmax": _per_element(5, "softmax"),
        "aten::_log_softmax": _per_element(5, "softmax"),
        "aten::native_layer_norm": _per_element(8, "layer_norm", weight_inputs=2),
        "aten::rms_norm": _per_element(4, "rms_norm", weight_inputs=1),
        "aten::_fused_rms_norm": _per_element(4, "rms_norm", weight_inputs=1),
    }
    for name in ATTENTION_SIGNATURES:
        models[name] = _attention_for(name)
    for base in POINTWISE_FLOPS:
        models[f"aten::{base}"] = _pointwise_for(base, inplace=False)
        models[f"aten::{base}_"] = _pointwise_for(base, inplace=True)
    for base in REDUCTIONS:
        models[f"aten::{base}"] = _reduction_for(base)
    return models


MODELS = _registry()


@lru_cache(maxsize=65536)
def op_cost(name: str, dims: str | None, types: str | None, concrete: str | None) -> OpCost | None:
    model = MODELS.get(name)
    if model is None or dims is None:
        return None
    try:
        args = parse_inputs(dims, types)
        values = json.loads(concrete) if concrete else []
        return model(args, [str(v) for v in values])
    except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError, RecursionError):
        return None  # shapes this model cannot read: the op stays without a cost
