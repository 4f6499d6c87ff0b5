"""Measured ceilings on disk: where `kernelscope hw calibrate` stores them and how they are found again."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import msgspec

from kernelscope.contracts.calibration import Calibration


def device_slug(device_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")


def calibration_dirs() -> list[Path]:
    """$KERNELSCOPE_CALIBRATION_DIR (default ~/.cache/kernelscope/calibration), then the measurements shipped
    with kernelscope (data/calibration/)."""
    user = Path(os.environ.get("KERNELSCOPE_CALIBRATION_DIR", Path.home() / ".cache/kernelscope/calibration"))
    shipped = Path(str(resources.files("kernelscope.data").joinpath("calibration")))
    return [user, shipped]


def _read(path: Path) -> Calibration | None:
    """A stored calibration, or None for a file that is not one (it is skipped, as if absent)."""
    try:
        calibration = Calibration.from_json(path.read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return None
    return msgspec.structs.replace(calibration, path=str(path))


def find_calibration(device_name: str | None, dirs: list[Path] | None = None) -> Calibration | None:
    if not device_name:
        return None
    for directory in dirs if dirs is not None else calibration_dirs():
        path = directory / f"{device_slug(device_name)}.json"
        if path.is_file() and (found := _read(path)) is not None:
            return found
    return None


def find_calibration_matching(pattern: str, dirs: list[Path] | None = None) -> Calibration | None:
    """The first stored calibration whose device name matches `pattern` (a hardware.toml `match` regex), so
    that `--hw h100-sxm` uses an H100's measured ceilings where one was calibrated."""
    for calibration in _stored(dirs if dirs is not None else calibration_dirs()):
        if re.search(pattern, calibration.device, flags=re.IGNORECASE):
            return calibration
    return None


def _stored(dirs: list[Path]) -> Iterator[Calibration]:
    for directory in dirs:
        if directory.is_dir():
            for path in sorted(directory.glob("*.json")):
                if (found := _read(path)) is not None:
                    yield found


def write_calibration(calibration: Calibration, out: Path | None) -> Path:
    """Store a calibration (default: the user's calibration directory, named after the device)."""
    target = out or calibration_dirs()[0] / f"{device_slug(calibration.device)}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(msgspec.json.format(msgspec.json.encode(calibration.to_dict()), indent=2) + b"\n")
    return target
