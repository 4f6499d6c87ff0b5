"""Which torch device a workload runs on, from the --device argument."""

from __future__ import annotations

import torch

from kernelscope.errors import UserError


def resolve_device(name: str | None) -> torch.device:
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"--device: unknown device '{name}' (use cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA GPU is available to this process")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) present")
    elif device.type != "cpu":
        raise UserError(f"--device: unsupported device type '{device.type}' (use cpu or cuda)")
    return device
