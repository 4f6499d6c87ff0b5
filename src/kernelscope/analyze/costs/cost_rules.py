"""Cost models as data: the rules of data/cost_models.toml (docs/roofline.md lists each with its formula and source).

A rule names the framework ops it costs (regular expressions on the op name, matched whole) and a model:
- `formula`: `flops` and `bytes` formulas (analyze/costs/cost_expressions.py) and a `precision`;
- `gemm`: the problem `m`, `n`, `k` (`batch`), the operands `a` and `b` (and `out`), extra bytes (scales, bias):
  2·batch·m·n·k FLOPs; bytes = a + b + output + extra;
- `attention`: `heads`, `kv_heads`, `head_dim`, `v_head_dim` and the tensors whose element sizes hold queries and
  keys; the step's token counts give the work (analyze/costs/step_tokens.py): 2·heads·(head_dim + v_head_dim) FLOPs per
  query-key pair, bytes = queries and outputs once, each key and value of the step's contexts once;
- `fused_moe`: routed `tokens`, `hidden`, `experts`, `top_k`, `up_n` (columns of the gate/up GEMM) and `down_k`
  (rows of the down GEMM), `expert_bytes` (one expert's weights): 2·tokens·top_k·hidden·(up_n + down_k) FLOPs,
  bytes = activations in and out + the weights of the experts that can receive a token, min(experts, tokens·top_k).
Formulas read the op's inputs (`in0`, `in1`, … : tensors by position), scalars (`scalar(i)`), the step's token
counts, the model's config (import --model-config) and what the ops inside a fused op recorded (`inner_*`).
Rules are tried in file order; the first whose formulas can all be evaluated costs the op.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from kernelscope.analyze.costs.cost_expressions import Formula, Missing, Scope, compile_formula, evaluate
from kernelscope.analyze.costs.gemm_shape import SHORT_DTYPES, GemmShape
from kernelscope.analyze.costs.op_inputs import DTYPE_BYTES, MATRIX_PRECISION, OpCost, Tensor, parse_inputs
from kernelscope.analyze.costs.step_tokens import StepTokens
from kernelscope.load import knowledge

# Matrix-engine precision of a declared element format (packed weights hold two fp4 values a byte).
FORMAT_PRECISION = {"fp4": "fp4", "mxfp4": "fp4", "nvfp4": "fp4", "fp8": "fp8", "mxfp8": "fp8", "int8": "int8",
                    "int4": "int8"}
# Wider wins: a mixed GEMM computes at the precision of its wider operand.
_PRECISION_ORDER = ["fp4", "int8", "fp8", "fp16", "bf16", "tf32", "fp32", "fp64"]
_MODELS = ("formula", "gemm", "attention", "fused_moe")
_FIELDS = {
    "formula": ("flops", "bytes"),
    "gemm": ("m", "n", "k", "batch", "extra_bytes"),
    "attention": ("heads", "kv_heads", "head_dim", "v_head_dim", "kv_token_bytes"),
    "fused_moe": ("tokens", "hidden", "experts", "top_k", "up_n", "down_k", "expert_bytes"),
}
_TENSOR_FIELDS = ("a", "b", "out", "q", "kv", "act")


@dataclass(frozen=True)
class Signature:
    """What a cost is computed from: the op's name, its recorded inputs (JSON text as in ops.parquet) and, for fused
    ops whose rule asks for it, what the ops inside it recorded (JSON; analyze/costs/fused_inner.py)."""

    name: str
    dims: str | None
    types: str | None
    concrete: str | None
    inner: str | None = None


@dataclass(frozen=True)
class CostRule:
    id: str
    pattern: re.Pattern[str]
    model: str
    formulas: dict[str, Formula]
    tensors: dict[str, str]  # a, b, out, q, kv, act → input name (`in1`)
    precision: str | None
    formats: dict[str, str]  # a / b → declared element format (fp4 packed two a byte …)
    inner: bool
    flop_categories: tuple[str, ...]
    when: Formula | None = None
    evidence: str | None = None  # a cost_source the rule itself rests on (kernel_metadata, estimated)


def functions(args: list[Any], concrete: list[str], op_name: str = "") -> dict[str, Any]:
    def tensor(t: Any) -> Tensor:
        if not isinstance(t, Tensor):
            raise Missing("tensor")
        return t

    def scalar(i: int) -> float:
        text = concrete[int(i)] if int(i) < len(concrete) else ""
        try:
            value = float(text)
        except ValueError:
            raise Missing(f"scalar {i}") from None
        return int(value) if value.is_integer() else value

    def dim(t: Any, i: int) -> int:
        shape = tensor(t).shape
        if not -len(shape) <= int(i) < len(shape):
            raise Missing("dimension")
        return shape[int(i)]

    return {
        "numel": lambda t: tensor(t).numel, "size": lambda t: tensor(t).nbytes,
        "elem": lambda t: DTYPE_BYTES.get(tensor(t).dtype, 4), "dim": dim, "ndim": lambda t: len(tensor(t).shape),
        "rows": lambda t: tensor(t).numel // max(dim(t, -1), 1), "row": lambda t: tensor(t).nbytes // max(dim(t, 0), 1),
        "tensors": lambda: sum(a.nbytes for a in args if isinstance(a, Tensor)),
        "largest": lambda: max((a.numel for a in args if isinstance(a, Tensor)), default=0),
        "name_ops": lambda: name_ops(op_name),
        "loop_elements": lambda: loop_elements(args, concrete),
        "loop_bytes": lambda: loop_bytes(args, concrete),
        "scalar": scalar, "min": min, "max": max, "ceil": math.ceil, "floor": math.floor,
        "log2": lambda x: math.log2(max(x, 1)),
    }


_FUNCTION_NAMES = frozenset(functions([], []))


@cache
def _arithmetic_words() -> dict[str, float]:
    return dict(knowledge.cost_models().get("inductor", {}).get("arithmetic", {}))


def loop_elements(args: list[Any], concrete: list[str]) -> int:
    """Elements a generated (Inductor) kernel iterates over: the product of its integer scalar arguments (its
    xnumel, and rnumel for a reduction), else the largest buffer's."""
    sizes = [int(v) for v in concrete if v.isdigit() and int(v) > 0]
    if sizes:
        return math.prod(sizes)
    return max((a.numel for a in args if isinstance(a, Tensor)), default=0)


def loop_bytes(args: list[Any], concrete: list[str]) -> float:
    """Each buffer of a generated kernel touched once, no more of it than the kernel iterates over; a buffer more
    than 8 times the size of all the others together is read by index (an embedding table, a rotary cache): as
    many of its elements as the largest other buffer holds."""
    tensors = sorted((a for a in args if isinstance(a, Tensor)), key=lambda t: t.nbytes, reverse=True)
    if not tensors:
        raise Missing("buffers")
    elements = loop_elements(args, concrete)
    counted = [min(t.numel, elements) * DTYPE_BYTES.get(t.dtype, 4) for t in tensors]
    if len(tensors) > 1 and tensors[0].nbytes > 8 * sum(t.nbytes for t in tensors[1:]):
        counted[0] = min(counted[0], tensors[1].numel * DTYPE_BYTES.get(tensors[0].dtype, 4))
    return float(sum(counted))


@lru_cache(maxsize=4096)
def name_ops(name: str) -> float:
    """FLOPs per element that an Inductor kernel's name lists (`triton_poi_fused_add_mul_0`: 2): each arithmetic
    word of data/cost_models.toml [inductor.arithmetic] once."""
    words = set(re.sub(r"^triton_(?:poi|red|per)_(?:fused_)?", "", name).split("_"))
    return float(sum(v for w, v in _arithmetic_words().items() if w in words))


@cache
def rules() -> tuple[CostRule, ...]:
    return tuple(_rule(raw) for raw in knowledge.cost_models()["op"])


def _rule(raw: dict[str, Any]) -> CostRule:
    model = raw.get("model", "formula")
    if model not in _MODELS:
        raise ValueError(f"cost rule {raw.get('id')}: unknown model {model!r}")
    pattern = re.compile("|".join(f"(?:{p})" for p in raw["ops"]))
    formulas = {f: compile_formula(str(raw[f]), _FUNCTION_NAMES) for f in _FIELDS[model] if f in raw}
    default_flops = {"gemm": ("GEMM", "GEMV"), "attention": ("attention",), "fused_moe": ("GEMM", "GEMV")}
    when = compile_formula(str(raw["when"]), _FUNCTION_NAMES) if "when" in raw else None
    return CostRule(id=raw["id"], pattern=pattern, model=model, formulas=formulas,
                    tensors={f: raw[f] for f in _TENSOR_FIELDS if f in raw}, precision=raw.get("precision"),
                    formats={k: v for k, v in raw.get("formats", {}).items()}, inner=bool(raw.get("inner", False)),
                    flop_categories=tuple(raw.get("flop_categories", default_flops.get(model, ()))), when=when,
                    evidence=raw.get("evidence"))


@lru_cache(maxsize=8192)
def matching_rules(name: str) -> tuple[CostRule, ...]:
    return tuple(r for r in rules() if r.pattern.fullmatch(name))


def needs_inner(name: str) -> bool:
    return any(r.inner for r in matching_rules(name))


@dataclass(frozen=True)
class RuleCost:
    cost: OpCost
    used: frozenset[str]  # the names its formulas read: which evidence it rests on
    flop_categories: tuple[str, ...] = ()


def rule_cost(sig: Signature, step: StepTokens | None, config: dict[str, float] | None) -> RuleCost | None:
    """The cost of an op by the first rule of its name that applies, or None."""
    found = matching_rules(sig.name)
    if not found:
        return None
    try:
        args = parse_inputs(sig.dims, sig.types)
        concrete = [str(v) for v in json.loads(sig.concrete)] if sig.concrete else []
        inner = json.loads(sig.inner) if sig.inner else {}
    except (ValueError, TypeError, RecursionError):
        return None
    funcs = functions(args, concrete, sig.name)
    for rule in found:
        scope = Scope(_names(args, step, config, inner), funcs)
        try:
            if rule.when is not None and not evaluate(rule.when, scope):
                continue
            made = _MODEL_FUNCTIONS[rule.model](rule, scope, args)
        except (Missing, TypeError, ValueError, KeyError, IndexError, OverflowError, ZeroDivisionError):
            continue
        if made is not None:
            cost, gemms = made
            used = scope.used | ({f"evidence_{rule.evidence}"} if rule.evidence else set())
            cost = OpCost(cost.flops, cost.bytes, cost.precision, cost.model, gemms)
            return RuleCost(cost=cost, used=frozenset(used), flop_categories=rule.flop_categories)
    return None


def _names(args: list[Any], step: StepTokens | None, config: dict[str, float] | None, inner: dict[str, Any]):
    def lookup(key: str) -> Any:
        if key.startswith("in") and key[2:].isdigit():
            i = int(key[2:])
            return args[i] if i < len(args) else None
        if key.startswith("inner_"):
            value = inner.get(key[len("inner_"):])
            return _as_value(value)
        if key.startswith("step_"):
            return None if step is None else getattr(step, key[len("step_"):], None)
        if key.startswith("config_"):
            return None if config is None else config.get(key[len("config_"):])
        return None

    return lookup


def _as_value(value: Any) -> Any:
    if isinstance(value, dict) and "shape" in value:
        return Tensor(tuple(value["shape"]), value.get("dtype", ""))
    return value


def _get(rule: CostRule, scope: Scope, field: str, default: Any = None) -> Any:
    formula = rule.formulas.get(field)
    if formula is None:
        if default is None:
            raise Missing(field)
        return default
    value = evaluate(formula, scope)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise Missing(field)
    return value


def _tensor(rule: CostRule, scope: Scope, field: str) -> Tensor:
    name = rule.tensors.get(field)
    value = scope.name(name) if name else None
    if not isinstance(value, Tensor):
        raise Missing(field)
    return value


def _precision_of(t: Tensor, declared: str | None) -> str:
    if declared:
        return FORMAT_PRECISION.get(declared, declared)
    return MATRIX_PRECISION.get(t.dtype, "fp32")


def _wider(*precisions: str) -> str:
    return max(precisions, key=lambda p: _PRECISION_ORDER.index(p) if p in _PRECISION_ORDER else 0)


def _formula(rule: CostRule, scope: Scope, args: list[Any]) -> tuple[OpCost, tuple]:
    flops, nbytes = _get(rule, scope, "flops"), _get(rule, scope, "bytes")
    precision = rule.precision or "fp32"
    if precision == "matrix":
        precision = _precision_of(_tensor(rule, scope, "a"), rule.formats.get("a"))
    return OpCost(float(flops), float(nbytes), precision, rule.id), ()


def _dtype_name(t: Tensor, declared: str | None) -> str:
    return declared or SHORT_DTYPES.get(t.dtype, t.dtype or "?")


def _gemm(rule: CostRule, scope: Scope, args: list[Any]) -> tuple[OpCost, tuple]:
    m, n, k = int(_get(rule, scope, "m")), int(_get(rule, scope, "n")), int(_get(rule, scope, "k"))
    batch = int(_get(rule, scope, "batch", 1))
    a, b = _tensor(rule, scope, "a"), _tensor(rule, scope, "b")
    out = _tensor(rule, scope, "out") if "out" in rule.tensors else None
    wide_in = DTYPE_BYTES.get(a.dtype, 2) >= 2
    out_elem = DTYPE_BYTES.get(out.dtype, 2) if out is not None else (DTYPE_BYTES.get(a.dtype, 2) if wide_in else 2)
    extra = _get(rule, scope, "extra_bytes", 0)
    precision = rule.precision or _wider(_precision_of(a, rule.formats.get("a")), _precision_of(b, rule.formats.get("b")))
    out_name = SHORT_DTYPES.get(out.dtype, "?") if out is not None else (SHORT_DTYPES.get(a.dtype, "?") if wide_in else "bf16")
    shape = GemmShape(m, n, k, batch, f"{_dtype_name(a, rule.formats.get('a'))}×{_dtype_name(b, rule.formats.get('b'))}"
                      f"→{out_name}")
    nbytes = a.nbytes + b.nbytes + batch * m * n * out_elem + extra
    return OpCost(2.0 * batch * m * n * k, float(nbytes), precision, rule.id), (shape,)


def _attention(rule: CostRule, scope: Scope, args: list[Any]) -> tuple[OpCost, tuple]:
    heads, kv_heads = _get(rule, scope, "heads"), _get(rule, scope, "kv_heads")
    d, dv = _get(rule, scope, "head_dim"), _get(rule, scope, "v_head_dim")
    q, kv = _tensor(rule, scope, "q"), _tensor(rule, scope, "kv")
    pairs, q_tokens, kv_tokens = (scope.name("step_pairs"), scope.name("step_q_tokens"), scope.name("step_kv_tokens"))
    flops = 2.0 * heads * (d + dv) * pairs
    q_elem = DTYPE_BYTES.get(q.dtype, 2)
    kv_token = _get(rule, scope, "kv_token_bytes", kv_heads * (d + dv) * DTYPE_BYTES.get(kv.dtype, 2))
    nbytes = q_tokens * heads * (d + dv) * q_elem + kv_tokens * kv_token
    return OpCost(flops, float(nbytes), rule.precision or _precision_of(q, None), rule.id), ()


def _fused_moe(rule: CostRule, scope: Scope, args: list[Any]) -> tuple[OpCost, tuple]:
    tokens, hidden = int(_get(rule, scope, "tokens")), int(_get(rule, scope, "hidden"))
    experts, top_k = int(_get(rule, scope, "experts")), int(_get(rule, scope, "top_k"))
    up_n, down_k = int(_get(rule, scope, "up_n")), int(_get(rule, scope, "down_k"))
    expert_bytes = _get(rule, scope, "expert_bytes")
    act = _tensor(rule, scope, "act")
    if not (0 < top_k <= experts):
        raise Missing("top_k")
    rows = tokens * top_k
    touched = min(experts, rows)
    nbytes = 2 * tokens * hidden * DTYPE_BYTES.get(act.dtype, 2) + touched * expert_bytes
    weights = rule.formats.get("b") or _weight_format(scope)
    dtypes = f"{SHORT_DTYPES.get(act.dtype, '?')}×{weights or '?'}→{SHORT_DTYPES.get(act.dtype, '?')}"
    gemms = (GemmShape(rows, up_n, hidden, 1, dtypes), GemmShape(rows, hidden, down_k, 1, dtypes))
    flops = 2.0 * rows * hidden * (up_n + down_k)
    # The matrix engine runs at the activations' precision unless the weights are the wider.
    precision = rule.precision or _precision_of(act, None)
    return OpCost(flops, float(nbytes), precision, rule.id), gemms


def _weight_format(scope: Scope) -> str:
    """The experts' weight format as the inner ops or the config show it (`4-bit`, `fp8e4m3`, …), else ''."""
    try:
        if "inner_up_n" in scope.used:
            value = scope.name("inner_weight_format")
            return value if isinstance(value, str) else ""
        if "config_expert_weight_bytes" in scope.used:
            return {0.5: "4-bit", 1.0: "8-bit"}.get(float(scope.name("config_expert_weight_bytes")), "")
    except Missing:
        return ""
    return ""


_MODEL_FUNCTIONS = {"formula": _formula, "gemm": _gemm, "attention": _attention, "fused_moe": _fused_moe}
