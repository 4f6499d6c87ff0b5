"""The parts of an inferred decoder layer, by position in its unit, named after what its kernels do.

A pre-norm decoder layer runs: a norm, the attention (projections, the attention kernel, the output projection),
a second norm, the MLP (or a mixture of experts). Within one layer's unit of kernels the attention kernel (the
catalog's `attention` category, or an attention op) is the landmark: the matrix multiplies before it and the first
one after it are the attention's projections; the matrix multiplies after that are the MLP's; what precedes the
attention is the input norm, what lies between attention and MLP the post-attention norm, where a norm's kernels
are there (the catalog's `norm` category, or a norm op: `aten::rms_norm`, `aten::layer_norm`, RMSNorm's `aten::pow`
and `aten::rsqrt`). The MLP is a `moe` where routing kernels (top-k, sort, MoE routing or dispatch) are in it. The
rest (residual additions) belongs to the layer itself. A unit without an attention kernel gets no parts.
"""

from __future__ import annotations

import re

INPUT_NORM, ATTENTION, POST_ATTENTION_NORM, MLP, MOE = "input_norm", "attention", "post_attention_norm", "mlp", "moe"
PRE_ATTENTION = "pre_attention"

_ATTENTION_CATEGORIES = {"attention", "attention-combine"}
_MATRIX_CATEGORIES = {"GEMM", "GEMV"}
_ROUTING_CATEGORIES = {"MoE routing", "MoE dispatch", "MoE combine", "sort/topk"}
_ATTENTION_OP = re.compile(r"attention|flash_attn|_flash_|sdpa|paged_attention", re.IGNORECASE)
_MATRIX_OP = re.compile(r"^aten::(?:mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|_grouped_mm|_scaled_grouped_mm)$")
_NORM_OP = re.compile(r"^aten::(?:rms_norm|_fused_rms_norm|layer_norm|native_layer_norm|group_norm|pow|rsqrt)$")
_NORM_NAME = re.compile(r"rsqrt|rms_?norm|layer_?norm|RMSNorm|LayerNorm", re.IGNORECASE)
_ROUTING_OP = re.compile(r"^aten::(?:topk|sort|argsort|one_hot|_grouped_mm|index_add_)$")


def is_attention(category: str | None, op: str | None) -> bool:
    """The attention kernel itself (not its projections)."""
    return category in _ATTENTION_CATEGORIES or bool(op and _ATTENTION_OP.search(op))


def is_matrix_work(category: str | None, op: str | None) -> bool:
    """A GEMM or an attention kernel: what every decoder layer does."""
    return category in _MATRIX_CATEGORIES or category in _ATTENTION_CATEGORIES or \
        bool(op and (_MATRIX_OP.match(op) or _ATTENTION_OP.search(op)))


def is_norm(category: str | None, op: str | None, name: str) -> bool:
    """A norm's kernel: the catalog's `norm`, a norm op, or (without ops) a name of one (`rsqrt`, `rms_norm`,
    `layer_norm`)."""
    return category == "norm" or bool(op and _NORM_OP.match(op)) or bool(_NORM_NAME.search(name))


def unit_parts(categories: list[str | None], ops: list[str | None], same_op: list[bool],
               norm: list[bool]) -> list[str | None]:
    """Per position of one layer's unit: its part (None: the layer itself). same_op: the kernel belongs to the same
    framework op as the one before it (a split-K GEMM's reduction), so the two count as one matrix multiply; norm:
    the kernel is a norm's (is_norm)."""
    n = len(categories)
    attention = [i for i in range(n) if is_attention(categories[i], ops[i])]
    if not attention:
        return [None] * n
    first, last = attention[0], attention[-1]
    matrix = [i for i in range(n) if i not in attention and not (i and same_op[i])
              and (categories[i] in _MATRIX_CATEGORIES or bool(ops[i] and _MATRIX_OP.match(ops[i] or "")))]
    before = [i for i in matrix if i < first]
    after = [i for i in matrix if i > last]
    attn_start = before[0] if before else first
    attn_end = after[0] if after else last
    mlp = after[1:]
    parts: list[str | None] = [None] * n
    if attn_start > 0:
        parts[:attn_start] = [INPUT_NORM if any(norm[:attn_start]) else PRE_ATTENTION] * attn_start
    while attn_end + 1 < n and same_op[attn_end + 1]:
        attn_end += 1  # the output projection's split-K reduction
    parts[attn_start:attn_end + 1] = [ATTENTION] * (attn_end + 1 - attn_start)
    if not mlp:
        return parts
    mlp_start, mlp_end = mlp[0], mlp[-1]
    while mlp_end + 1 < n and (same_op[mlp_end + 1] or _is_routing(categories[mlp_end + 1], ops[mlp_end + 1])):
        mlp_end += 1  # the experts' results gathered back (index_add, scatter) after their last GEMM
    between = range(attn_end + 1, mlp_start)
    if any(norm[i] for i in between):
        for i in between:
            parts[i] = POST_ATTENTION_NORM
    routed = any(_is_routing(categories[i], ops[i]) for i in range(mlp_start, mlp_end + 1))
    parts[mlp_start:mlp_end + 1] = [MOE if routed else MLP] * (mlp_end + 1 - mlp_start)
    return parts


def _is_routing(category: str | None, op: str | None) -> bool:
    return category in _ROUTING_CATEGORIES or bool(op and _ROUTING_OP.match(op))
