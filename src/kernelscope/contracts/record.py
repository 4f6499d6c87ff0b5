"""The base of the typed records of run.json and summary.json: keyword construction, JSON keys as the field
names."""

from __future__ import annotations

import msgspec


class Record(msgspec.Struct, kw_only=True):
    """Base of the records: keyword construction, JSON keys as the field names."""
