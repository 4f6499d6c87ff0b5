"""What `kernelscope whatif` reads about a target: a device spec file (TOML), `--set` / `--sweep` values with
units, and projection-model files written by `kernelscope hw fit` (docs/whatif.md)."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path
from typing import Any

from kernelscope.errors import UserError

# --set keys → (Target field or precision, unit kind). Precisions set that precision's peak FLOP/s.
QUANTITIES: dict[str, tuple[str, str]] = {
    "bw": ("bandwidth", "rate"),
    "bandwidth": ("bandwidth", "rate"),
    "sram": ("sram_bytes", "size"),
    "sram_bw": ("onchip_bandwidth", "rate"),
    "l2": ("l2_bytes", "size"),
    "latency": ("latency_scale", "number"),
    **{p: (p, "flops") for p in ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")},
}
# --set keys that change what the target does rather than a quantity.
OPTIONS = {"fuse": "bool", "weights": "bits"}
# --set keys of the parallel what-if (several GPUs): how many ranks, the link between them (one direction, per
# GPU), the latency each extra ring step adds.
PARALLEL = {"ranks": "count", "link": "rate", "link_latency": "time"}
_TIME_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
MAX_RANKS = 65536
WEIGHT_BITS = {"bf16": 16, "fp16": 16, "int8": 8, "fp8": 8, "int4": 4, "fp4": 4}

_UNITS = {
    "rate": {"": 1.0, "b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12, "pb/s": 1e15},
    "size": {"": 1.0, "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20,
             "gib": 2**30},
    "flops": {"": 1.0, "flops": 1.0, "gflops": 1e9, "tflops": 1e12, "pflops": 1e15, "flop/s": 1.0,
              "gflop/s": 1e9, "tflop/s": 1e12, "pflop/s": 1e15},
    "number": {"": 1.0, "x": 1.0},
}
# Units a bare number in a --sweep range is read in (bw=1:5:9 means 1 to 5 TB/s).
SWEEP_UNITS = {"rate": "tb/s", "size": "mb", "flops": "tflop/s", "number": ""}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*([a-z/]*)\s*$", re.IGNORECASE)


def parse_quantity(key: str, text: str, default_unit: str = "", flag: str = "--set") -> float:
    """A value of --set (or --sweep, named by `flag`): '2TB/s', '400TFLOPS', '256MB', '0.5'. A bare number takes
    default_unit. Zero, negative and non-finite values are refused: no target has them, and they would turn
    into infinite or undefined speed-ups."""
    field, kind = QUANTITIES[key]
    match = _NUMBER.match(text)
    if not match:
        raise UserError(f"{flag} {key}: '{text}' is not a number with a unit (e.g. {_example(kind)})")
    number, unit = float(match.group(1)), (match.group(2).lower() or default_unit)
    if not unit and kind != "number":
        raise UserError(f"{flag} {key}: '{text}' needs a unit (e.g. {_example(kind)})")
    scale = _UNITS[kind].get(unit)
    if scale is None:
        raise UserError(f"{flag} {key}: unknown unit '{match.group(2)}' (use e.g. {_example(kind)})")
    value = number * scale
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{flag} {key}: '{text}' must be a positive finite quantity")
    return value


def _example(kind: str) -> str:
    return {"rate": "3.35TB/s", "size": "256MB", "flops": "989TFLOPS", "number": "0.5"}[kind]


def parse_settings(text: str | None) -> tuple[dict[str, float], dict[str, Any]]:
    """--set 'bw=2TB/s,bf16=400TFLOPS,sram=256MB,fuse=yes,weights=fp8' → (quantities by Target field or
    precision, options: fuse (bool), weight_bits (int)). The keys of the parallel what-if are left out: see
    parse_parallel."""
    quantities: dict[str, float] = {}
    options: dict[str, Any] = {}
    seen: dict[str, str] = {}  # what a key sets (aliases such as bw and bandwidth set one thing) → the key
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise UserError(f"--set: '{part}' is not KEY=VALUE")
        target = QUANTITIES[key][0] if key in QUANTITIES else key
        if target in seen:
            also = "" if seen[target] == key else f" (also as '{seen[target]}')"
            raise UserError(f"--set: '{key}' is given twice{also}; give each value once")
        seen[target] = key
        if key in PARALLEL:
            continue
        if key in QUANTITIES:
            quantities[QUANTITIES[key][0]] = parse_quantity(key, value)
        elif key == "fuse":
            if value.strip().lower() not in ("yes", "no", "true", "false", "1", "0"):
                raise UserError(f"--set fuse: '{value}' (use yes or no)")
            options["fuse"] = value.strip().lower() in ("yes", "true", "1")
        elif key == "weights":
            bits = WEIGHT_BITS.get(value.strip().lower())
            if bits is None:
                raise UserError(f"--set weights: '{value}' (use one of {', '.join(WEIGHT_BITS)})")
            options["weight_bits"] = bits
        else:
            raise UserError(f"--set: unknown key '{key}' (known: {', '.join([*QUANTITIES, *OPTIONS, *PARALLEL])})")
    return quantities, options


def parse_parallel(text: str | None) -> dict[str, float]:
    """The parallel what-if's --set keys: ranks (a count), link (bytes/s, one direction per GPU, e.g. 450GB/s),
    link_latency (ns; e.g. 2us)."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        key, _, value = part.partition("=")
        key, value = key.strip().lower(), value.strip()
        if key == "ranks":
            if not value.isdigit() or not 1 <= int(value) <= MAX_RANKS:
                raise UserError(f"--set ranks: '{value}' is not a number of ranks (1 … {MAX_RANKS})")
            out["ranks"] = int(value)
        elif key == "link":
            out["link"] = _rate(value)
        elif key == "link_latency":
            out["link_latency"] = _time_ns(value)
    return out


def _rate(text: str) -> float:
    match = _NUMBER.match(text)
    scale = _UNITS["rate"].get(match.group(2).lower()) if match and match.group(2) else None
    if scale is None:
        raise UserError(f"--set link: '{text}' is not a bandwidth with a unit (e.g. 450GB/s, one direction)")
    value = float(match.group(1)) * scale
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"--set link: '{text}' must be a positive finite bandwidth")
    return value


def _time_ns(text: str) -> float:
    match = _NUMBER.match(text.replace("µ", "u"))
    unit = (match.group(2).lower() if match else "") or ""
    if not match or unit not in _TIME_UNITS:
        raise UserError(f"--set link_latency: '{text}' is not a time with a unit (e.g. 2us, 500ns)")
    value = float(match.group(1)) * _TIME_UNITS[unit]
    if not math.isfinite(value) or value < 0:
        raise UserError(f"--set link_latency: '{text}' must be a finite time ≥ 0")
    return value


def parse_sweep(text: str) -> tuple[str, list[float]]:
    """--sweep 'bw=1:5:9' → ("bandwidth", nine values from 1 to 5 TB/s). Units as in --set; bare numbers in
    TB/s, TFLOP/s, MB or plain numbers by the key's kind."""
    key, sep, spec = text.partition("=")
    key = key.strip().lower()
    if not sep or key not in QUANTITIES:
        raise UserError(f"--sweep: '{text}' is not KEY=START:STOP:COUNT with KEY one of {', '.join(QUANTITIES)}")
    parts = spec.split(":")
    if len(parts) != 3:
        raise UserError(f"--sweep {key}: '{spec}' is not START:STOP:COUNT (e.g. 1:5:9)")
    kind = QUANTITIES[key][1]
    start = parse_quantity(key, parts[0], SWEEP_UNITS[kind], flag="--sweep")
    stop = parse_quantity(key, parts[1], SWEEP_UNITS[kind], flag="--sweep")
    try:
        count = int(parts[2])
    except ValueError:
        raise UserError(f"--sweep {key}: count '{parts[2]}' is not an integer") from None
    if count < 2 or count > 200 or start <= 0 or stop <= start:
        raise UserError(f"--sweep {key}: need 0 < START < STOP and 2 ≤ COUNT ≤ 200, got {spec}")
    step = (stop - start) / (count - 1)
    return QUANTITIES[key][0], [start + i * step for i in range(count)]


def read_spec_file(path: Path) -> dict[str, Any]:
    """A target described in TOML: name, memory_bandwidth (bytes/s), peak = {bf16 = …} (FLOP/s), and optionally
    l2_bytes, sram_bytes, sram_bandwidth, latency_scale. Numbers may also be strings with units."""
    data = _read_toml(path, "spec file")
    if "memory_bandwidth" not in data or not isinstance(data.get("peak"), dict) or not data["peak"]:
        raise UserError(f"{path}: a target spec needs memory_bandwidth and a [peak] table (e.g. bf16 = \"400TFLOPS\")")
    out: dict[str, Any] = {"name": str(data.get("name") or path.stem)}
    try:
        out["bandwidth"] = _value(data["memory_bandwidth"], "bw")
        out["flops"] = {str(k): _value(v, str(k)) for k, v in data["peak"].items()}
        for key, field, unit_key in (("l2_bytes", "l2_bytes", "l2"), ("sram_bytes", "sram_bytes", "sram"),
                                     ("sram_bandwidth", "onchip_bandwidth", "sram_bw"),
                                     ("latency_scale", "latency_scale", "latency")):
            if key in data:
                out[field] = _value(data[key], unit_key)
        if "energy" in data:  # read by load/energy_terms where the study prices energy
            out["energy"] = data["energy"]
    except KeyError as exc:
        raise UserError(f"{path}: unknown precision {exc} in [peak] (known: {', '.join(p for p, (_, k) in QUANTITIES.items() if k == 'flops')})") from None
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    return out


def _read_toml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise UserError(f"{path}: no such {what}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid TOML ({exc})") from None
    except RecursionError:
        raise UserError(f"{path}: not valid TOML (nested too deeply)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _value(value: Any, key: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"{key} = {value!r} must be a positive finite number")
        return float(value)
    if key not in QUANTITIES:
        raise KeyError(key)
    return parse_quantity(key, str(value))


def read_model_file(path: Path) -> dict[str, Any]:
    """A projection model written by `kernelscope hw fit` (same layout as data/projection.toml)."""
    data = _read_toml(path, "projection-model file")
    factors = data.get("factors")
    if not isinstance(factors, dict) or "other" not in factors:
        raise UserError(f"{path}: not a projection model (needs [factors.*] tables including [factors.other])")
    for name, f in factors.items():
        missing = [k for k in ("latency_ns", "memory_efficiency", "compute_efficiency") if k not in (f or {})]
        if missing:
            raise UserError(f"{path}: [factors.{name}] lacks {', '.join(missing)}")
    return data


def model_toml(data: dict[str, Any], header: str) -> str:
    """The projection-model TOML text of `data` (groups, what_if, fit, device_latency, factors)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for section in ("groups", "what_if", "fit", "device_latency"):
        table = data.get(section) or {}
        lines += ["", f"[{section}]"] + [f"{_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    for name, values in (data.get("factors") or {}).items():
        lines += ["", f"[factors.{_key(name)}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    for family, table in (data.get("families") or {}).items():
        for name, values in table.items():
            lines += ["", f"[families.{_key(family)}.{_key(name)}]"] + [f"{k} = {_toml_value(v)}"
                                                                       for k, v in values.items()]
    for name, values in (data.get("device_roofs") or {}).items():
        lines += ["", f"[device_roofs.{_key(name)}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    for name, values in (data.get("device_kind_latency") or {}).items():
        lines += ["", f"[device_kind_latency.{_key(name)}]"] + [f"{_key(k)} = {_toml_value(v)}"
                                                                 for k, v in values.items()]
    for case, values in (data.get("uncertainty") or {}).items():
        lines += ["", f"[uncertainty.{_key(case)}]"] + [f"{_key(k)} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else '"' + key.replace('"', '\\"') + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
