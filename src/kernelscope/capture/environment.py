"""Describe the machine and software a run used."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

import torch

import kernelscope
from kernelscope.contracts.run_info import Hardware, Software


def describe_hardware(device: torch.device) -> Hardware:
    cpu = _cpu_model()
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return Hardware(
            device_type="cuda", cpu=cpu, cpu_cores=os.cpu_count(), name=props.name, count=torch.cuda.device_count(),
            memory_bytes=props.total_memory, sm_count=props.multi_processor_count,
            compute_capability=f"{props.major}.{props.minor}", l2_cache_bytes=getattr(props, "L2_cache_size", None),
            driver_version=_nvidia_driver(),
        )
    return Hardware(device_type=device.type, cpu=cpu, cpu_cores=os.cpu_count(), name=cpu, count=1,
                    threads=torch.get_num_threads())


def describe_software() -> Software:
    return Software(
        kernelscope=kernelscope.__version__,
        python=platform.python_version(),
        platform=platform.platform(),
        torch=str(torch.__version__),
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        transformers=_version("transformers"),
        triton=_version("triton"),
        polars=_version("polars"),
        msgspec=_version("msgspec"),
        argv=list(sys.argv),
        commit=_source_commit(),
    )


def _source_commit() -> str | None:
    """The git commit kernelscope's source is at, where it runs from a checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.dirname(kernelscope.__file__),
                             capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
