"""Arithmetic formulas of the cost-model data file (data/cost_models.toml), evaluated without `eval`.

A formula is a Python-syntax arithmetic expression over numbers, names and a fixed set of functions:
`2 * numel(in1) + size(in0)`, `dim(in0, -1)`, `min(experts, tokens * top_k)`, `a if tokens > 1 else b`.
Anything else (attributes, subscripts, lambdas, comprehensions, unknown functions) is refused when the file is
read. A name is looked up in a Scope; a name it does not have raises Missing, and so does a function given a
tensor the op did not record: the rule then does not apply to that op (the next rule may).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any


class Missing(Exception):  # noqa: N818 — a value the formula needs is not known for this op
    """A name or tensor a formula needs is not there: the rule does not apply."""


_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Constant, ast.Name, ast.Load,
            ast.Call, ast.IfExp, ast.Compare, ast.BoolOp, ast.And, ast.Or, *_BINARY, *_COMPARE)


@dataclass(frozen=True)
class Formula:
    text: str
    tree: ast.Expression = field(repr=False, compare=False, hash=False)


class FormulaError(ValueError):
    """A formula of the data file that is not plain arithmetic over known functions."""


@cache
def compile_formula(text: str, functions: frozenset[str]) -> Formula:
    try:
        tree = ast.parse(str(text), mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"formula {text!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            raise FormulaError(f"formula {text!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float):
            raise FormulaError(f"formula {text!r}: only numbers are allowed as constants")
        if isinstance(node, ast.Call) and (not isinstance(node.func, ast.Name) or node.func.id not in functions
                                           or node.keywords):
            raise FormulaError(f"formula {text!r}: unknown function")
    return Formula(text=str(text), tree=tree)


class Scope:
    """Names and functions a formula may use; `used` collects the names it read (which evidence a cost used)."""

    def __init__(self, names: Callable[[str], Any], functions: dict[str, Callable[..., Any]]) -> None:
        self._names = names
        self.functions = functions
        self.used: set[str] = set()

    def name(self, key: str) -> Any:
        self.used.add(key)
        value = self._names(key)
        if value is None:
            raise Missing(key)
        return value


def evaluate(formula: Formula, scope: Scope) -> Any:
    return _eval(formula.tree.body, scope)


def _eval(node: ast.AST, scope: Scope) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return scope.name(node.id)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, scope), _eval(node.right, scope)
        try:
            return _BINARY[type(node.op)](_number(left), _number(right))
        except ZeroDivisionError:
            raise Missing("division by zero") from None
    if isinstance(node, ast.UnaryOp):
        value = _number(_eval(node.operand, scope))
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.IfExp):
        return _eval(node.body, scope) if _eval(node.test, scope) else _eval(node.orelse, scope)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, scope)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, scope)
            if not _COMPARE[type(op)](_number(left), _number(right)):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, scope) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Call):
        return scope.functions[node.func.id](*(_eval(a, scope) for a in node.args))
    raise FormulaError(f"unsupported node {type(node).__name__}")  # refused at compile time already


def _number(value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Missing("a tensor or text where a number is needed")
    if isinstance(value, float) and not math.isfinite(value):
        raise Missing("not a finite number")
    return value
