"""The catalog of public model configs (src/kernelscope/data/model_catalog/*.json, one file a model; its README names
each one's source and licence): what a trace can be recognised as (analyze/recognition/) and the config its costs
then read. Each entry's `config` is checked as a `--model-config` file is (load/model_config.py), so a recognised
model's run.json `model.config` holds the same keys as a given one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kernelscope.load.model_config import checked_config

_PACKAGE = "kernelscope.data"
_FOLDER = "model_catalog"


@dataclass(frozen=True, eq=False)  # one object per entry (model_catalog() is cached): hashed by identity
class CatalogEntry:
    """One public model: its name, where its config.json is published and under which licence, the names the
    serving engines' and transformers' code give its implementation (`model_files`: <name>.py of vLLM's
    model_executor/models and SGLang's srt/models, transformers' models/<name>/modeling_<name>.py;
    `class_prefixes`: the prefix of its nn.Module classes, `Qwen2` of Qwen2ForCausalLM), and its config."""

    name: str
    source: str
    licence: str
    model_files: tuple[str, ...]
    class_prefixes: tuple[str, ...]
    config: dict[str, Any]


@cache
def model_catalog() -> tuple[CatalogEntry, ...]:
    """Every entry, by name."""
    folder = resources.files(_PACKAGE).joinpath(_FOLDER)
    entries = [_entry(json.loads(item.read_text(encoding="utf-8")), item.name)
               for item in folder.iterdir() if item.name.endswith(".json")]
    return tuple(sorted(entries, key=lambda e: e.name.lower()))


def catalog_entry(name: str) -> CatalogEntry | None:
    return next((e for e in model_catalog() if e.name == name), None)


def _entry(raw: dict[str, Any], file: str) -> CatalogEntry:
    where = f"model catalog {file}"
    return CatalogEntry(name=str(raw["name"]), source=str(raw["source"]), licence=str(raw["licence"]),
                        model_files=tuple(raw["model_files"]), class_prefixes=tuple(raw["class_prefixes"]),
                        config=checked_config(raw["config"], where))
