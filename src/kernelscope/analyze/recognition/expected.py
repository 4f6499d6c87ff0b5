"""The shapes a model of the catalog shows in a trace at one tensor-parallel degree (the [[expect]] rules of
data/model_recognition.toml, their formulas over the config's sizes), each with the sizes it depends on: a clue
that equals it checks those sizes."""

from __future__ import annotations

import itertools
import math
from functools import cache
from typing import Any

from kernelscope.analyze.costs.cost_expressions import Missing, Scope, compile_formula, evaluate
from kernelscope.analyze.costs.model_config import config_values, language_config
from kernelscope.load import knowledge
from kernelscope.load.model_catalog import CatalogEntry

# Sizes recognition reads beyond the cost formulas' names (MLA's projections).
_EXTRA = {"q_lora_rank": "q_lora_rank", "qk_nope_head_dim": "qk_nope_head_dim", "v_head_dim": "v_head_dim"}
_FUNCTIONS = {
    "pad": lambda n, m: math.ceil(n / m) * m,
    "share": lambda n, tp: n / tp if n >= tp else 1,
}
_TP = "tp"

# kind → {values → the sizes they check}
Expected = dict[str, dict[tuple[int, ...], frozenset[str]]]


def model_sizes(entry: CatalogEntry) -> dict[str, float]:
    """The names the formulas read, from the entry's config (the cost formulas' own, analyze/costs/model_config.py,
    and MLA's projection sizes)."""
    sizes = {k: v for k, v in config_values(entry.config).items()}
    config = language_config(entry.config)
    for name, key in _EXTRA.items():
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            sizes[name] = float(value)
    return sizes


def attention_kind(sizes: dict[str, float]) -> str:
    return "mla" if sizes.get("kv_lora_rank") else "mha"


def tensor_parallel_degrees(entry: CatalogEntry, world_size: int) -> list[int]:
    """The degrees a trace of `world_size` ranks can split this model by: divisors of the world that divide its
    attention heads."""
    heads = int(model_sizes(entry).get("heads", 1))
    return [tp for tp in range(1, world_size + 1) if world_size % tp == 0 and heads % tp == 0]


@cache
def expected_shapes(entry: CatalogEntry, tp: int) -> Expected:
    sizes = {**model_sizes(entry), _TP: float(tp)}
    kind_of_attention = attention_kind(sizes)
    out: dict[str, dict[tuple[int, ...], frozenset[str]]] = {}
    for rule in knowledge.model_recognition()["expect"]:
        if rule.get("attention", kind_of_attention) != kind_of_attention:
            continue
        options = [_alternatives(v, sizes) for v in rule["values"]]
        shapes = out.setdefault(rule["kind"], {})
        for combination in itertools.product(*options):
            values = tuple(v for v, _ in combination)
            fields = frozenset().union(*(f for _, f in combination))
            # The same shape from two formulas checks only what both read.
            shapes[values] = shapes[values] & fields if values in shapes else fields
    return out


def _alternatives(value: Any, sizes: dict[str, float]) -> list[tuple[int, frozenset[str]]]:
    """Each formula's whole-number value with the sizes it read; formulas needing a size the model lacks drop out."""
    texts = value if isinstance(value, list) else [value]
    out = []
    for text in texts:
        scope = Scope(sizes.get, _FUNCTIONS)
        try:
            number = evaluate(compile_formula(str(text), frozenset(_FUNCTIONS)), scope)
        except Missing:
            continue
        if isinstance(number, bool) or not isinstance(number, int | float) or number <= 0 or number != int(number):
            continue
        out.append((int(number), frozenset(scope.used - {_TP})))
    return out
