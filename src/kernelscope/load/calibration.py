"""Measured ceilings on disk: where `kernelscope hw calibrate` stores them and how they are found again."""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any


def device_slug(device_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")


def calibration_dirs() -> list[Path]:
    """$KERNELSCOPE_CALIBRATION_DIR (default ~/.cache/kernelscope/calibration), then the measurements shipped
    with kernelscope (data/calibration/)."""
    user = Path(os.environ.get("KERNELSCOPE_CALIBRATION_DIR", Path.home() / ".cache/kernelscope/calibration"))
    shipped = Path(str(resources.files("kernelscope.data").joinpath("calibration")))
    return [user, shipped]


def find_calibration(device_name: str | None, dirs: list[Path] | None = None) -> dict[str, Any] | None:
    if not device_name:
        return None
    for directory in dirs if dirs is not None else calibration_dirs():
        path = directory / f"{device_slug(device_name)}.json"
        if path.is_file():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            data["path"] = str(path)
            return data
    return None


def find_calibration_matching(pattern: str, dirs: list[Path] | None = None) -> dict[str, Any] | None:
    """The first stored calibration whose device name matches `pattern` (a hardware.toml `match` regex), so
    that `--hw h100-sxm` uses an H100's measured ceilings where one was calibrated."""
    for directory in dirs if dirs is not None else calibration_dirs():
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(data, dict) and re.search(pattern, str(data.get("device", "")), flags=re.IGNORECASE):
                data["path"] = str(path)
                return data
    return None
