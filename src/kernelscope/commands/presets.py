"""`kernelscope presets`: the model presets (data/presets.toml)."""

from __future__ import annotations

import argparse

HELP = "list model presets"
DESCRIPTION = "List the model presets."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No arguments."""


def run(args: argparse.Namespace, steps) -> int:
    from kernelscope.workload.presets import load_presets

    presets = load_presets().values()
    name_width = max(len(p.name) for p in presets)
    type_width = max(len(p.model_type) for p in presets)
    for preset in presets:
        print(f"{preset.name:{name_width}s} {preset.model_type:{type_width}s} {preset.description}")
    return 0
