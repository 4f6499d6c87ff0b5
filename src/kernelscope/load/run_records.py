"""run.json and summary.json decoded as typed records, whatever their bytes: every failure (not JSON, not UTF-8,
nested beyond the decoder's depth, the wrong shape, a number no record can hold) is one UserError naming the file."""

from __future__ import annotations

import math
from typing import Any, TypeVar

import msgspec

from kernelscope.contracts.summary import SCHEMA_VERSION as SUMMARY_SCHEMA_VERSION
from kernelscope.contracts.summary import Summary
from kernelscope.errors import UserError

T = TypeVar("T")
INT64 = 1 << 63


def decode_record(name: str, data: bytes | str, kind: type[T], what: str) -> T:
    """`data` (the file `name`) as a `kind`; `what` names the record in the refusal ("run description")."""
    try:
        record = msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as exc:
        raise UserError(f"{name}: not a kernelscope {what}: {exc}") from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{name}: invalid JSON ({exc})") from None
    except RecursionError:
        raise UserError(f"{name}: not a kernelscope {what}: JSON nested too deeply") from None
    plain = msgspec.to_builtins(record)
    where = _impossible_number(plain) if not _all_numbers_fit(plain) else None
    if where is not None:
        raise UserError(f"{name}: not a kernelscope {what}: {where}")
    return record


def decode_summary(name: str, data: bytes | str) -> Summary:
    """summary.json (the file `name`) as a Summary. A schema version newer than this kernelscope reads, or one that
    is not a whole number, is refused; a file without the key predates it and has version 1's shape."""
    raw = decode_plain(name, data)
    version = raw.get("schema_version", SUMMARY_SCHEMA_VERSION) if isinstance(raw, dict) else SUMMARY_SCHEMA_VERSION
    if not isinstance(version, int) or isinstance(version, bool) or version > SUMMARY_SCHEMA_VERSION:
        raise UserError(f"{name}: schema version {str(version)[:40]!r} is not readable by this kernelscope "
                        f"(reads versions up to {SUMMARY_SCHEMA_VERSION})")
    return decode_record(name, data, Summary, "summary")


def decode_plain(name: str, data: bytes | str) -> Any:
    """`data` as plain JSON values (for a first look, e.g. at a schema version), refused like decode_record."""
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{name}: invalid JSON ({exc})") from None
    except RecursionError:
        raise UserError(f"{name}: invalid JSON (nested too deeply)") from None


def _all_numbers_fit(value: Any) -> bool:
    """Whether every number in `value` fits a table: the common case, checked without building the paths that
    _impossible_number names (that took as long as decoding the record)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind is int:
            if not -INT64 <= item < INT64:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif kind not in (str, bool, type(None)):
            return _impossible_number(item) is None
    return True


def _impossible_number(value: Any, path: str = "$") -> str | None:
    """Where a number lies that no table can hold (an integer beyond 64 bits, a float that is not finite)."""
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and not -INT64 <= item < INT64:
            return f"{where} is an integer beyond 64 bits"
        if isinstance(item, float) and not math.isfinite(item):
            return f"{where} is not a finite number"
        if isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[{i}]") for i, v in enumerate(item))
    return None
