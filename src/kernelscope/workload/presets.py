"""Model presets, read from data/presets.toml."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any


@dataclass(frozen=True)
class Preset:
    name: str
    model_type: str
    description: str
    config: dict[str, Any] = field(default_factory=dict)


@cache
def load_presets() -> dict[str, Preset]:
    text = resources.files("kernelscope.data").joinpath("presets.toml").read_text(encoding="utf-8")
    table = tomllib.loads(text)["presets"]
    return {
        name: Preset(
            name=name,
            model_type=entry["model_type"],
            description=entry.get("description", ""),
            config=dict(entry.get("config", {})),
        )
        for name, entry in table.items()
    }
