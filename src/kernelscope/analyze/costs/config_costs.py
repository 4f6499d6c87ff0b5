"""Costs of kernels whose trace recorded no shapes, from the model's config (`import --model-config`): a kernel's
module gives its role in the model (the [[role]] rules of data/cost_models.toml: q_proj, down_proj, attention,
norm, …), the config the sizes of that role, and the kernel's step its tokens (the step's annotation, else
`--batch-size` and `--prompt-len`: a prefill step holds batch × prompt tokens, decode step i one token a sequence
attending to prompt + i + 1). Each call of a module in a step is one unit; its kernels share its cost as an op's
do (analyze/costs/op_splits.py). Labelled `model_config`. Kernels whose module fits no role, or whose step's tokens are
unknown, stay without a cost.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import polars as pl

from kernelscope.analyze.costs.cost_expressions import Formula, Missing, Scope, compile_formula, evaluate
from kernelscope.analyze.costs.op_splits import split_unit_costs
from kernelscope.analyze.costs.step_tokens import StepTokens
from kernelscope.contracts.tables import COST_COLUMNS
from kernelscope.load import knowledge

_FIELDS = ("m", "n", "k", "flops", "bytes", "heads", "kv_heads", "head_dim", "v_head_dim", "tokens", "hidden",
           "experts", "top_k", "up_n", "down_k", "expert_bytes")
_FUNCTIONS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor}
_MATRIX = {"gemm": ("GEMM", "GEMV"), "attention": ("attention",), "fused_moe": ("GEMM", "GEMV")}
_PRECISION = {2: "bf16", 1: "fp8", 4: "fp32"}


@dataclass(frozen=True)
class Role:
    id: str
    module: re.Pattern[str]
    categories: tuple[str, ...]
    model: str
    formulas: dict[str, Formula]
    gemms: tuple[tuple[Formula, Formula, Formula], ...] = ()  # model gemm_list: the unit's GEMMs, (m, n, k) each
    attributions: tuple[str, ...] = ()  # where the kernel's module came from (kernels.attribution_source); any if empty


@cache
def roles() -> tuple[Role, ...]:
    names = frozenset(_FUNCTIONS)
    return tuple(Role(id=r["id"], module=re.compile(r["module"]), categories=tuple(r.get("categories", ())),
                      model=r.get("model", "formula"),
                      formulas={f: compile_formula(str(r[f]), names) for f in _FIELDS if f in r},
                      gemms=tuple(tuple(compile_formula(str(x), names) for x in g) for g in r.get("gemms", ())),
                      attributions=tuple(r.get("attributions", ())))
                 for r in knowledge.cost_models().get("role", []))


def role_of(module: str | None, category: str | None, attribution: str | None = None) -> str | None:
    if not module:
        return None
    for role in roles():
        if (role.module.search(module) and (not role.categories or category in role.categories)
                and (not role.attributions or attribution in role.attributions)):
            return role.id
    return None


def config_costs(k: pl.DataFrame, config: dict[str, float], tokens_of) -> pl.DataFrame:
    """k: the kernels being costed (kernel_costs); uncosted device kernels with a module get a role's cost.
    tokens_of(phase, step) → StepTokens | None."""
    open_rows = (pl.col("cost_model").is_null() & (pl.col("kind") == "kernel") & pl.col("module").is_not_null()
                 & (pl.col("step").is_not_null() | (pl.col("phase") == "prefill")))
    columns = ["module", "category", "attribution_source"]
    candidates = k.filter(open_rows).select(columns).unique()
    if not candidates.height:
        return k
    mapping = [(m, c, a, role_of(m, c, a)) for m, c, a in candidates.iter_rows()]
    assigned = pl.DataFrame(mapping, schema={"module": pl.String, "category": pl.String,
                                             "attribution_source": pl.String, "_role": pl.String},
                            orient="row").filter(pl.col("_role").is_not_null())
    if not assigned.height:
        return k
    k = k.join(assigned, on=columns, how="left", maintain_order="left", nulls_equal=True)
    k = k.with_columns(pl.when(open_rows).then(pl.col("_role")).alias("_role"))
    keys = ["rank", "phase", "step", "generation", "module", "_role"]
    units = (k.filter(pl.col("_role").is_not_null()).group_by(keys, maintain_order=True).agg()
             .with_columns((-(1 << 50) - pl.int_range(pl.len(), dtype=pl.Int64)).alias("_cunit")))
    by_id = {r.id: r for r in roles()}
    rows = []
    for phase, step, role_id, unit in units.select("phase", "step", "_role", "_cunit").iter_rows():
        made = _role_cost(by_id[role_id], config, tokens_of(phase, step))
        if made is not None:
            rows.append((unit, *made))
    schema = {"_unit": pl.Int64, "_flops": pl.Float64, "_bytes": pl.Float64, "_precision": pl.String,
              "_model": pl.String, "_source": pl.String, "_flop_categories": pl.List(pl.String),
              "_gemms": pl.List(pl.Struct({"m": pl.Int64, "n": pl.Int64, "k": pl.Int64, "batch": pl.Int64,
                                           "dtypes": pl.String}))}
    costed = pl.DataFrame(rows, schema=schema, orient="row")
    part = (k.join(units, on=keys, how="left", maintain_order="left", nulls_equal=True)
            .with_columns(pl.col("_cunit").alias("_unit")))
    split = split_unit_costs(part.drop(COST_COLUMNS).with_columns(pl.lit(None, dtype=pl.Int64).alias("cost_op_id")),
                             costed)
    take = split["cost_model"].is_not_null() & part["_cunit"].is_not_null()
    return k.drop("_role").with_columns(
        pl.when(take).then(split[c]).otherwise(k[c]).alias(c) for c in COST_COLUMNS)


def _role_cost(role: Role, config: dict[str, float], tokens: StepTokens | None) -> tuple | None:
    def names(key: str) -> Any:
        if key.startswith("config_"):
            return config.get(key[len("config_"):])
        if tokens is None:
            return None
        return {"step_tokens": tokens.q_tokens, "step_requests": tokens.requests, "step_kv_tokens": tokens.kv_tokens,
                "step_pairs": tokens.pairs}.get(key)

    scope = Scope(names, _FUNCTIONS)
    act = config.get("act_bytes", 2)
    try:
        get = {f: float(evaluate(formula, scope)) for f, formula in role.formulas.items()}
        if role.model == "gemm":
            m, n, kk = (int(get[x]) for x in ("m", "n", "k"))
            weight = config.get("weight_bytes", act)
            nbytes = (m * kk + m * n) * act + kk * n * weight
            dtypes = f"{_name(act)}×{_name(weight)}→{_name(act)}"
            gemms = [{"m": m, "n": n, "k": kk, "batch": 1, "dtypes": dtypes}]
            return (2.0 * m * n * kk, float(nbytes), _PRECISION.get(int(act), "bf16"), "config.gemm", _source(tokens),
                    list(_MATRIX["gemm"]), gemms)
        if role.model == "gemm_list":  # several GEMMs in one module (a layer's parts read from the kernel sequence)
            weight = config.get("weight_bytes", act)
            dtypes = f"{_name(act)}×{_name(weight)}→{_name(act)}"
            shapes = [tuple(int(evaluate(f, scope)) for f in g) for g in role.gemms]
            gemms = [{"m": m, "n": n, "k": kk, "batch": 1, "dtypes": dtypes} for m, n, kk in shapes]
            flops = sum(2.0 * m * n * kk for m, n, kk in shapes)
            nbytes = sum((m * kk + m * n) * act + kk * n * weight for m, n, kk in shapes)
            return (flops, float(nbytes), _PRECISION.get(int(act), "bf16"), "config.gemm", _source(tokens),
                    list(_MATRIX["gemm"]), gemms)
        if role.model == "attention":
            heads, kv_heads, d, dv = (get[x] for x in ("heads", "kv_heads", "head_dim", "v_head_dim"))
            q, kv, pairs = (scope.name(x) for x in ("step_tokens", "step_kv_tokens", "step_pairs"))
            nbytes = q * heads * (d + dv) * act + kv * kv_heads * (d + dv) * act
            return (2.0 * heads * (d + dv) * pairs, float(nbytes), _PRECISION.get(int(act), "bf16"),
                    "config.attention", _source(tokens), list(_MATRIX["attention"]), [])
        if role.model == "fused_moe":
            t, h, e, top_k = (int(get[x]) for x in ("tokens", "hidden", "experts", "top_k"))
            up_n, down_k = int(get["up_n"]), int(get["down_k"])
            rows = t * top_k
            nbytes = 2 * t * h * act + min(e, rows) * get["expert_bytes"]
            dtypes = f"{_name(act)}×{_name(config.get('expert_weight_bytes', act))}→{_name(act)}"
            gemms = [{"m": rows, "n": up_n, "k": h, "batch": 1, "dtypes": dtypes},
                     {"m": rows, "n": h, "k": down_k, "batch": 1, "dtypes": dtypes}]
            return (2.0 * rows * h * (up_n + down_k), float(nbytes), _PRECISION.get(int(act), "bf16"),
                    "config.fused_moe", _source(tokens), list(_MATRIX["fused_moe"]), gemms)
        return (get["flops"], get["bytes"], "fp32", f"config.{role.id}", _source(tokens), [], [])
    except (Missing, KeyError, TypeError, ValueError, OverflowError):
        return None


def _source(tokens: StepTokens | None) -> str:
    return "estimated" if tokens is not None and tokens.estimated else "model_config"


def _name(size: float) -> str:
    return {2: "bf16", 1: "8-bit", 0.5: "4-bit", 4: "fp32"}.get(size, f"{size:g}B")
