"""TOML files shipped inside the package (knowledge in data/, report words in report/messages/)."""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any


def packaged_toml(package: str, name: str) -> dict[str, Any]:
    """The parsed TOML file `name` (a path relative to `package`'s folder)."""
    return tomllib.loads(resources.files(package).joinpath(name).read_text(encoding="utf-8"))
