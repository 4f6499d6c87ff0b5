"""The projection model's parameters and the targets it projects onto (docs/whatif.md): per kind of work a
per-kernel latency and the efficiencies reached of the memory and compute roofs, fitted per device family where the
fitting runs hold that family (data/projection.toml, `kernelscope hw fit`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from kernelscope.analyze.hardware import Ceilings
from kernelscope.load import knowledge


@dataclass(frozen=True)
class GroupFactors:
    latency_ns: float
    memory_efficiency: float
    compute_efficiency: float


@dataclass(frozen=True)
class ProjectionModel:
    groups: dict[str, str]  # catalog category → kind of work
    factors: dict[str, GroupFactors]
    fusable: tuple[str, ...]
    weight_bound: tuple[str, ...]
    onchip_bandwidth_ratio: float
    fit: dict[str, Any] = field(default_factory=dict)
    device_latency: dict[str, float] = field(default_factory=dict)  # fitted device → its latency scale
    # Device family (the architecture of data/hardware.toml: "Hopper", "CDNA 3") → the factors fitted on that
    # family's runs alone, for the kinds of work its runs had. Other families use `factors`.
    families: dict[str, dict[str, GroupFactors]] = field(default_factory=dict)
    # Kind of work ("*": a phase) → relative width of the range around an estimate (ln of estimate ÷ measured,
    # root mean square over held-out projections): "same" when source and target are of one family, "other" else.
    uncertainty: dict[str, dict[str, float]] = field(default_factory=dict)
    # Device (its spec's name) → the shares of its datasheet bandwidth and compute peaks that runs of one workload on
    # it and on a measured device show it reaches (projection_kinds); only for datasheet ceilings.
    device_roofs: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Device (its spec's name) → kind of work → its per-kernel latency relative to the factors' (vendor libraries and
    # launch paths differ by kind: an attention kernel of another vendor's library); fitted on pairs of runs
    # (projection_kinds), only for devices with datasheet ceilings.
    device_kind_latency: dict[str, dict[str, float]] = field(default_factory=dict)

    def factors_of(self, group: str) -> GroupFactors:
        return self.factors.get(group) or self.factors["other"]

    def factors_for(self, family: str | None) -> dict[str, GroupFactors]:
        """The factors a target of this device family projects with."""
        return {**self.factors, **self.families.get(family or "", {})}


def _factors(table: dict[str, Any]) -> dict[str, GroupFactors]:
    return {name: GroupFactors(float(f["latency_ns"]), float(f["memory_efficiency"]), float(f["compute_efficiency"]))
            for name, f in table.items()}


def parse_model(data: dict[str, Any]) -> ProjectionModel:
    what_if = data.get("what_if") or {}
    return ProjectionModel(
        groups=dict(data.get("groups") or {}),
        factors=_factors(data.get("factors") or {}),
        families={name: _factors(table) for name, table in (data.get("families") or {}).items()},
        uncertainty={case: {g: float(v) for g, v in table.items()}
                     for case, table in (data.get("uncertainty") or {}).items()},
        fusable=tuple(what_if.get("fusable", ())),
        weight_bound=tuple(what_if.get("weight_bound", ())),
        onchip_bandwidth_ratio=float(what_if.get("onchip_bandwidth_ratio", 8.0)),
        fit=dict(data.get("fit") or {}),
        device_latency={name: float(v) for name, v in (data.get("device_latency") or {}).items()},
        device_roofs={name: (float(v["memory"]), float(v["compute"]))
                      for name, v in (data.get("device_roofs") or {}).items()},
        device_kind_latency={name: {g: float(x) for g, x in table.items()}
                             for name, table in (data.get("device_kind_latency") or {}).items()},
    )


@cache
def default_model() -> ProjectionModel:
    """The shipped model (data/projection.toml), parsed once."""
    return parse_model(knowledge.projection_model())


@dataclass(frozen=True)
class Target:
    """What the projection needs of a device. `source` says per quantity where it came from (measured,
    datasheet, spec file, --set)."""

    name: str
    bandwidth: float  # bytes/s
    flops: dict[str, float]  # FLOP/s per precision
    l2_bytes: float | None = None
    sram_bytes: float = 0.0  # on-chip capacity beyond the L2 (weights and KV kept resident)
    onchip_bandwidth: float | None = None  # bytes/s of that capacity; default: ratio × bandwidth
    latency_scale: float = 1.0  # per-kernel latency relative to the fitted GPUs (graphs, megakernel < 1)
    source: dict[str, str] = field(default_factory=dict)
    family: str | None = None  # the device's architecture: the projection model's factors may be fitted per family
    kind_latency: dict[str, float] = field(default_factory=dict)  # kind of work → its per-kernel latency multiplier

    def peak(self, precision: str | None) -> float | None:
        if precision is None:
            return None
        return self.flops.get(precision) or (self.flops.get("fp32") if precision == "tf32" else None)

    def changed(self, **values: Any) -> Target:
        return replace(self, **values)


def target_from_ceilings(ceilings: Ceilings, model: ProjectionModel | None = None) -> Target:
    """A device's ceilings as a target; its per-kernel latency scale when the model was fitted on it."""
    spec = ceilings.spec
    name = ceilings.device or (spec.name if spec else "device")
    keys = [k for k in (spec.name if spec else None, name) if k]  # the model's tables name devices by their spec
    scale = next((model.device_latency[k] for k in keys if k in model.device_latency), None) if model else None
    source = dict(ceilings.source, latency="fitted for this device" if scale else "mean of the fitted devices")
    family = spec.architecture if spec else None
    if model and family in model.families:
        source["factors"] = f"fitted on {family} devices"
    bandwidth, flops = ceilings.bandwidth, dict(ceilings.flops)
    roofs = next((model.device_roofs[k] for k in keys if k in model.device_roofs), None) if model else None
    if roofs:
        # A datasheet ceiling times the share of it that runs of one workload here and on a measured device show.
        memory, compute = roofs
        if source.get("bandwidth") == "datasheet":
            bandwidth *= memory
            source["bandwidth"] = f"datasheet × {memory:.2f} (fitted on pairs of runs)"
        for key in flops:
            if source.get(key) == "datasheet":
                flops[key] *= compute
                source[key] = f"datasheet × {compute:.2f} (fitted on pairs of runs)"
    kinds = next((model.device_kind_latency[k] for k in keys if k in model.device_kind_latency), None) if model else None
    if kinds:
        source["latency"] += ", per kind of work from pairs of runs"
    return Target(name=name, bandwidth=bandwidth, flops=flops, l2_bytes=spec.l2_bytes if spec else None,
                  latency_scale=scale or 1.0, source=source, family=family, kind_latency=dict(kinds or {}))


@dataclass(frozen=True)
class Options:
    fuse: bool = False  # fold element-wise chains into their producers
    weight_bits: int = 16  # bits per weight of the matrix products (8: int8 / fp8, 4: fp4)


def estimate_spread(model: ProjectionModel, source: Target, target: Target) -> float | None:
    """Relative width of the range around an estimate on `target` of a run measured on `source`: the held-out
    spread of the model (ln of estimate ÷ measured, root mean square) for a target of the source's device family,
    or of another family (any device of another family, a spec file). None where the model ships no spread, and 0
    on the measuring device itself (the estimate is the measurement)."""
    if target.name == source.name and target.bandwidth == source.bandwidth and target.flops == source.flops:
        return 0.0
    case = "same" if source.family is not None and source.family == target.family else "other"
    return (model.uncertainty.get(case) or {}).get("*")
