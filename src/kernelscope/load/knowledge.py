"""The knowledge kernelscope ships as data files (src/kernelscope/data/*.toml), read here and nowhere else, once
per process. Analyses receive what they need from these readers; they never open a file themselves."""

from __future__ import annotations

from functools import cache
from typing import Any

from kernelscope.packaged import packaged_toml

_DATA = "kernelscope.data"


@cache
def hardware() -> dict[str, Any]:
    """data/hardware.toml: [devices.*] datasheet specs with sources, [classification] roofline class rule."""
    return packaged_toml(_DATA, "hardware.toml")


@cache
def kernel_catalog() -> dict[str, Any]:
    """data/kernel_catalog.toml: ordered kernel-name rules (docs/catalog.md)."""
    return packaged_toml(_DATA, "kernel_catalog.toml")


@cache
def cpu_ops() -> dict[str, Any]:
    """data/cpu_ops.toml: categories and descriptions of framework ops on CPU-only runs."""
    return packaged_toml(_DATA, "cpu_ops.toml")


@cache
def findings() -> list[dict[str, Any]]:
    """data/findings.toml: finding rules (docs/findings.md)."""
    return packaged_toml(_DATA, "findings.toml")["finding"]


@cache
def compare_rules() -> dict[str, Any]:
    """data/compare.toml: how kernels of different runs are matched (docs/compare.md)."""
    return packaged_toml(_DATA, "compare.toml")


@cache
def projection_model() -> dict[str, Any]:
    """data/projection.toml: the shipped what-if projection model (docs/whatif.md)."""
    return packaged_toml(_DATA, "projection.toml")


@cache
def whatif_settings() -> dict[str, Any]:
    """data/whatif.toml: design options, latency goals and default sweeps of a what-if study."""
    return packaged_toml(_DATA, "whatif.toml")


@cache
def source_frames() -> dict[str, Any]:
    """data/source_frames.toml: which Python frames may name a kernel's source line (docs/importing.md)."""
    return packaged_toml(_DATA, "source_frames.toml")


@cache
def model_recognition() -> dict[str, Any]:
    """data/model_recognition.toml: how a trace's clues name a model of the catalog (docs/roofline.md)."""
    return packaged_toml(_DATA, "model_recognition.toml")


@cache
def cost_models() -> dict[str, Any]:
    """data/cost_models.toml: cost rules of serving engines' and compilers' ops (docs/roofline.md)."""
    return packaged_toml(_DATA, "cost_models.toml")


@cache
def step_annotations() -> list[dict[str, Any]]:
    """data/step_annotations.toml: step annotations of serving engines and scripts, in trust order."""
    return packaged_toml(_DATA, "step_annotations.toml")["rule"]


@cache
def annotation_modules() -> dict[str, Any]:
    """data/annotation_modules.toml: user annotations that are never modules (docs/importing.md)."""
    return packaged_toml(_DATA, "annotation_modules.toml")


@cache
def critical_path_rules() -> dict[str, Any]:
    """data/critical_path.toml: blocking calls, event waits and typical lags of the dependency graph."""
    return packaged_toml(_DATA, "critical_path.toml")
def noise_rule() -> dict[str, Any]:
    """data/noise.toml: the verdict rule of every comparison and when a run is noisy (docs/compare.md)."""
    return packaged_toml(_DATA, "noise.toml")


@cache
def nsys_enums() -> dict[str, Any]:
    """data/nsys_enums.toml: Nsight Systems' numbering of copy directions and memory kinds, for exports without their
    ENUM_* tables (docs/nsys.md)."""
    return packaged_toml(_DATA, "nsys_enums.toml")


@cache
def energy_rules() -> dict[str, Any]:
    """data/energy.toml: the energy split's models and the checks its fit must pass (docs/energy.md)."""
    return packaged_toml(_DATA, "energy.toml")
