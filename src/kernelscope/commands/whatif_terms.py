"""Energy terms of a what-if target (docs/whatif.md, "Energy") read from where they are given: a device's `energy`
table in data/hardware.toml or in a SPEC.toml, and --pj-per-flop / --pj-per-byte / --static-watts. A bad value is
one line naming where it was given."""

from __future__ import annotations

import math
from typing import Any

from kernelscope.analyze.hardware import PRECISIONS
from kernelscope.analyze.projection.energy_projection import EVERY, EnergyTerms
from kernelscope.errors import UserError

KEYS = ("pj_per_flop", "pj_per_byte", "static_watts")


def terms_from_table(table: Any, where: str) -> EnergyTerms:
    """An `energy` table: pj_per_flop (a number for every precision, or {bf16 = …, fp32 = …}), pj_per_byte,
    static_watts; any may be absent. `where` names the table in messages and in the terms' sources."""
    if not isinstance(table, dict):
        raise UserError(f"{where}: `energy` must be a table of {', '.join(KEYS)}")
    unknown = [str(k)[:40] for k in table if k not in (*KEYS, "sources")]
    if unknown:
        raise UserError(f"{where}: unknown energy term {unknown[0]!r} (known: {', '.join(KEYS)})")
    flops = table.get("pj_per_flop")
    per_flop = (_per_precision(flops, f"{where}: pj_per_flop") if isinstance(flops, dict)
                else {EVERY: _positive(flops, f"{where}: pj_per_flop")} if flops is not None else {})
    byte = table.get("pj_per_byte")
    watts = table.get("static_watts")
    return EnergyTerms(
        pj_per_flop=per_flop, pj_per_byte=_positive(byte, f"{where}: pj_per_byte") if byte is not None else None,
        static_watts=_positive(watts, f"{where}: static_watts", zero=True) if watts is not None else None,
        source={k: where for k in KEYS if table.get(k) is not None})


def terms_from_arguments(pj_per_flop: str | None, pj_per_byte: str | None, static_watts: str | None
                         ) -> EnergyTerms:
    """--pj-per-flop 0.5 (every precision) or bf16=0.5,fp32=2; --pj-per-byte 7; --static-watts 100."""
    per_flop: dict[str, float] = {}
    if pj_per_flop is not None:
        if "=" in pj_per_flop:
            pairs = [part.split("=", 1) for part in pj_per_flop.split(",") if part.strip()]
            if any(len(p) != 2 for p in pairs):
                raise UserError(f"--pj-per-flop: {pj_per_flop[:80]!r} is not PRECISION=PJ,… (e.g. bf16=0.5,fp32=2)")
            per_flop = _per_precision({k.strip(): _number(v, "--pj-per-flop") for k, v in pairs}, "--pj-per-flop")
        else:
            per_flop = {EVERY: _positive(_number(pj_per_flop, "--pj-per-flop"), "--pj-per-flop")}
    byte = _positive(_number(pj_per_byte, "--pj-per-byte"), "--pj-per-byte") if pj_per_byte is not None else None
    watts = (_positive(_number(static_watts, "--static-watts"), "--static-watts", zero=True)
             if static_watts is not None else None)
    given = {"pj_per_flop": pj_per_flop, "pj_per_byte": pj_per_byte, "static_watts": static_watts}
    return EnergyTerms(pj_per_flop=per_flop, pj_per_byte=byte, static_watts=watts,
                       source={k: f"--{k.replace('_', '-')}" for k, v in given.items() if v is not None})


def _per_precision(values: dict, where: str) -> dict[str, float]:
    out = {}
    for key, value in values.items():
        if key not in PRECISIONS:
            raise UserError(f"{where}: unknown precision {str(key)[:40]!r} (known: {', '.join(PRECISIONS)})")
        out[key] = _positive(value, f"{where} {key}")
    return out


def _number(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UserError(f"{where}: {text[:80]!r} is not a number") from None


def _positive(value: Any, where: str, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0 or \
            (value == 0 and not zero):
        raise UserError(f"{where}: {str(value)[:40]!r} must be a {'non-negative' if zero else 'positive'} finite "
                        "number")
    return float(value)
