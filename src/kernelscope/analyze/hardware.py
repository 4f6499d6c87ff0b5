"""Hardware specs (data/hardware.toml) and measured ceilings (`kernelscope hw calibrate` results), and the
ceilings an analysis uses for a device: measured where measured, datasheet otherwise, each labelled."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from kernelscope.contracts.calibration import Calibration
from kernelscope.load import knowledge

PRECISIONS = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
# A ceiling's source where a measurement was far below the datasheet (data/hardware.toml [calibration]): the
# datasheet value is used.
MEASURED_TOO_LOW = "datasheet (measured far lower: another path)"


@dataclass(frozen=True)
class Interconnect:
    """Links as datasheets quote them: bytes/s with both directions together."""

    host_link: str
    host_bandwidth: float
    link: str | None = None  # GPU-to-GPU (NVLink, Infinity Fabric); None where the part has none
    link_bandwidth: float | None = None


@dataclass(frozen=True)
class HardwareSpec:
    key: str
    name: str
    match: str
    vendor: str
    architecture: str
    sm_count: int
    boost_clock_mhz: float
    memory_bytes: float
    memory_bandwidth: float
    l2_bytes: float | None
    peak: dict[str, float]
    interconnect: Interconnect | None = None
    sources: list[str] = field(default_factory=list)
    # Energy terms where a public source gives them (data/hardware.toml, docs/whatif.md "Energy"): the table as
    # written (pj_per_flop, pj_per_byte, static_watts, sources); None where none is published.
    energy: dict | None = None

    def ridge(self, precision: str) -> float | None:
        peak = self.peak.get(precision)
        return peak / self.memory_bandwidth if peak else None


@dataclass(frozen=True)
class Ceilings:
    """What a roofline uses for one device. `source` says, per quantity, 'measured' or 'datasheet'."""

    device: str
    bandwidth: float
    flops: dict[str, float]
    source: dict[str, str]
    spec: HardwareSpec | None = None
    calibration: Calibration | None = None

    def peak(self, precision: str) -> float | None:
        return self.flops.get(precision) or (self.flops.get("fp32") if precision == "tf32" else None)

    def ridge(self, precision: str) -> float | None:
        peak = self.peak(precision)
        return peak / self.bandwidth if peak and self.bandwidth else None


@cache
def load_specs() -> dict[str, HardwareSpec]:
    table = knowledge.hardware()
    return {
        key: HardwareSpec(
            key=key, name=d["name"], match=d["match"], vendor=d["vendor"], architecture=d["architecture"],
            sm_count=int(d["sm_count"]), boost_clock_mhz=float(d["boost_clock_mhz"]),
            memory_bytes=float(d["memory_bytes"]), memory_bandwidth=float(d["memory_bandwidth"]),
            l2_bytes=float(d["l2_bytes"]) if d.get("l2_bytes") is not None else None,
            peak={k: float(v) for k, v in d["peak"].items()}, interconnect=_interconnect(d.get("interconnect")),
            sources=list(d.get("sources", [])), energy=d.get("energy"),
        )
        for key, d in table["devices"].items()
    }


def _interconnect(entry: dict | None) -> Interconnect | None:
    if not entry:
        return None
    link_bandwidth = entry.get("link_bandwidth")
    return Interconnect(host_link=entry["host_link"], host_bandwidth=float(entry["host_bandwidth"]),
                        link=entry.get("link"), link_bandwidth=float(link_bandwidth) if link_bandwidth else None)


def classification_rule() -> dict[str, float]:
    rule = knowledge.hardware()["classification"]
    return {k: float(v) for k, v in rule.items()}


def match_spec(device_name: str | None, memory_bytes: float | None = None) -> HardwareSpec | None:
    """The first spec whose pattern the name matches. Where several match and the device's memory is known,
    the first whose memory fits: names such as "A100-PG509-200" carry no size, the runtime's memory does."""
    if not device_name:
        return None
    candidates = [s for s in load_specs().values() if re.search(s.match, device_name, flags=re.IGNORECASE)]
    if len(candidates) > 1 and memory_bytes:
        fitting = [s for s in candidates if _memory_fits(s, memory_bytes)]
        candidates = fitting or candidates
    return candidates[0] if candidates else None


def _memory_fits(spec: HardwareSpec, memory_bytes: float) -> bool:
    # Datasheets quote decimal GB; runtimes report bytes a little short of that many GiB (80 GB → 79.6 GiB).
    return abs(memory_bytes / 2**30 - spec.memory_bytes / 1e9) <= 0.12 * spec.memory_bytes / 1e9


# A warp (NVIDIA) or wavefront (AMD CDNA) as each vendor's data-center GPUs run it: the device properties'
# warpSize tells the vendor apart where the trace does not name the device.
WARP_SIZE = {"NVIDIA": 32, "AMD": 64}


def identify_spec(sm_count: int | None, memory_bytes: float | None, warp_size: int | None = None
                  ) -> HardwareSpec | None:
    """The one spec with this many multiprocessors (AMD: compute units), memory that fits and, where given, the
    vendor's warp size: for a trace whose device properties do not name the device (vLLM on ROCm writes an empty
    name). None where no spec or several fit (an MI210 and an MI250 GCD both have 104 CUs and 64 GB)."""
    if not sm_count or not memory_bytes:
        return None
    fits = [s for s in load_specs().values()
            if s.sm_count == sm_count and _memory_fits(s, memory_bytes)
            and (warp_size is None or WARP_SIZE.get(s.vendor) == warp_size)]
    return fits[0] if len(fits) == 1 else None


def amd_architecture(device_name: str | None, compute_capability: str | None, spec_key: str | None = None
                     ) -> str | None:
    """An AMD GPU's architecture as ROCm names it (gfx94x) from the major.minor HIP reports where CUDA reports a
    compute capability; None for other devices. The vendor comes from the device's spec, else its name."""
    spec = load_specs().get(spec_key) if spec_key else match_spec(device_name)
    amd = spec.vendor == "AMD" if spec is not None else bool(re.search(r"\bAMD\b|Instinct|Radeon", device_name or ""))
    if not amd or not compute_capability:
        return None
    major, _, minor = compute_capability.partition(".")
    return f"gfx{major}{minor}x" if major.isdigit() and minor.isdigit() else None


def find_spec(name: str) -> HardwareSpec | None:
    """By key (h100-sxm) or by a device name."""
    return load_specs().get(name.lower()) or match_spec(name)


def ceilings_for(device_name: str | None, calibration: Calibration | None = None,
                 memory_bytes: float | None = None, spec_key: str | None = None) -> Ceilings | None:
    """Measured ceilings where a calibration of this device is given, datasheet values for the rest: of the
    spec the user named (spec_key) or else the one the device name and memory match."""
    spec = load_specs().get(spec_key) if spec_key else match_spec(device_name, memory_bytes)
    if spec is None and calibration is None:
        return None
    flops: dict[str, float] = dict(spec.peak) if spec else {}
    source = {key: "datasheet" for key in flops}
    bandwidth = spec.memory_bandwidth if spec else 0.0
    source["bandwidth"] = "datasheet" if spec else "none"
    if calibration:
        if calibration.copy_bandwidth:
            bandwidth = float(calibration.copy_bandwidth)
            source["bandwidth"] = "measured"
        floor = float(knowledge.hardware()["calibration"]["min_measured_share"])
        for key, value in calibration.gemm_flops.items():
            if not value:
                continue
            if key in flops and value < floor * flops[key]:  # measured off the path the datasheet quotes
                source[key] = MEASURED_TOO_LOW
                continue
            flops[key] = float(value)
            source[key] = "measured"
    return Ceilings(device=device_name or "", bandwidth=bandwidth, flops=flops, source=source, spec=spec,
                    calibration=calibration)
