"""A measurement of a device's ceilings (`kernelscope hw calibrate`), as stored in calibration JSON files."""

from __future__ import annotations

from typing import Any

import msgspec


class Calibration(msgspec.Struct, kw_only=True, omit_defaults=True):
    device: str
    copy_bandwidth: float  # bytes/s, read + write
    gemm_flops: dict[str, float | None] = msgspec.field(default_factory=dict)  # precision → FLOP/s (None: unsupported)
    device_type: str = "cuda"
    date: str | None = None
    kernelscope: str | None = None
    torch: str | None = None
    copy_bytes: int | None = None
    gemm_n: int | None = None
    repeats: int | None = None
    method: str | None = None
    threads: int | None = None
    source: str | None = None
    path: str | None = None  # where it was read from (not stored)

    @classmethod
    def from_json(cls, data: bytes | str) -> Calibration:
        return msgspec.json.decode(data, type=cls)

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(msgspec.structs.replace(self, path=None))
