"""The base of the typed records of run.json and summary.json: keyword construction, JSON keys as the field
names, and the file's text as a run directory holds it (`to_json`)."""

from __future__ import annotations

import json

import msgspec


class Record(msgspec.Struct, kw_only=True):
    """Base of the records: keyword construction, JSON keys as the field names."""

    def to_json(self) -> str:
        """The record as its file's text: JSON indented by two spaces, a newline at the end."""
        return json.dumps(msgspec.to_builtins(self), indent=2, default=str) + "\n"
