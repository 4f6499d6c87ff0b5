"""Model presets, read from data/presets.toml."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kernelscope.packaged import packaged_toml


@dataclass(frozen=True)
class Preset:
    name: str
    model_type: str
    description: str
    config: dict[str, Any] = field(default_factory=dict)


@cache
def load_presets() -> dict[str, Preset]:
    table = packaged_toml("kernelscope.data", "presets.toml")["presets"]
    return {
        name: Preset(
            name=name,
            model_type=entry["model_type"],
            description=entry.get("description", ""),
            config=dict(entry.get("config", {})),
        )
        for name, entry in table.items()
    }
